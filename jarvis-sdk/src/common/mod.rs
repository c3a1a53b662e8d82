//! Shared helpers every layer may use: text measured in Unicode characters,
//! the injected [`Clock`] and [`IdSource`], and atomic file replacement.
//!
//! `common` knows no layer: nothing here imports `model`, `memory`, `agent`,
//! `core` or `app`.

mod clock;
mod fs;
mod text;

pub use clock::{Clock, IdSource, ManualClock, SequentialIds, SystemClock, UniqueIds};
pub use fs::write_atomic;
pub use text::{char_len, truncate_chars, truncate_with_marker};
