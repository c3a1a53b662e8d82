//! Shared helpers every layer may use: text measured in Unicode characters,
//! the injected [`Clock`] and [`IdSource`], [`Timestamp`]s and the
//! [`TimeZone`] they are read in, atomic file
//! replacement ([`write_atomic`]) and locked read-modify-write
//! ([`update_file_locked`]), and the [`HomeLock`] that gives one process a
//! `JARVIS_HOME`.
//!
//! [`trace`] opens the GenAI spans every layer's work is traced in.
//!
//! This is the bottom layer of `jarvis-sdk`, a crate of its own so that the
//! compiler keeps it knowing no other layer. The facade re-exports the names
//! an application uses; `pg` (feature `postgres`), [`words`] and the `pub` helpers not
//! re-exported there (`StagedFile`, `one_line`, `error_chain`,
//! `jiff_timestamp`) are shared by the layers above and carry no stability
//! promise of their own.

mod clock;
mod extensions;
mod fs;
mod lock;
#[cfg(feature = "postgres")]
pub mod pg;

#[cfg(feature = "test-utils")]
pub mod testing;
mod text;
mod time;
pub mod trace;
pub mod words;
mod zone;

pub use clock::{Clock, IdSource, ManualClock, OffsetClock, SequentialIds, SystemClock, UniqueIds};
pub use extensions::Extensions;
pub use fs::StagedFile;
pub use fs::{lock_file_path, update_file_locked, write_atomic};
pub use lock::{HOME_LOCK_FILE, HomeLock, HomeLockError, LockHolder};
pub use text::{bigram_jaccard, char_len, fnv1a64, truncate_chars, truncate_with_marker};
pub use text::{error_chain, one_line};
pub use time::{CivilTime, Timestamp, TimestampError};
pub use zone::jiff_timestamp;
pub use zone::{DEFAULT_TIME_ZONE, TimeZone, TimeZoneError, UtcOffset};
