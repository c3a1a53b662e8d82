//! Shared helpers every layer may use: text measured in Unicode characters,
//! the injected [`Clock`] and [`IdSource`], [`Timestamp`]s and the
//! [`TimeZone`] they are read in, atomic file
//! replacement ([`write_atomic`]) and locked read-modify-write
//! ([`update_file_locked`]), and the [`HomeLock`] that gives one process a
//! `JARVIS_HOME`.
//!
//! [`trace`] opens the GenAI spans every layer's work is traced in.
//!
//! `common` knows no layer: nothing here imports `model`, `memory`, `agent`,
//! `core` or `app`.

mod clock;
mod extensions;
mod fs;
mod lock;
#[cfg(feature = "postgres")]
pub(crate) mod pg;

mod text;
mod time;
pub mod trace;
pub(crate) mod words;
mod zone;

pub use clock::{Clock, IdSource, ManualClock, OffsetClock, SequentialIds, SystemClock, UniqueIds};
pub use extensions::Extensions;
pub(crate) use fs::StagedFile;
pub use fs::{lock_file_path, update_file_locked, write_atomic};
pub use lock::{HOME_LOCK_FILE, HomeLock, HomeLockError, LockHolder};
pub use text::{bigram_jaccard, char_len, fnv1a64, truncate_chars, truncate_with_marker};
pub(crate) use text::{error_chain, one_line};
pub use time::{CivilTime, Timestamp, TimestampError};
pub(crate) use zone::jiff_timestamp;
pub use zone::{DEFAULT_TIME_ZONE, TimeZone, TimeZoneError, UtcOffset};
