//! The memory layer: recall quality, the assembled prompt, permissions,
//! the SQLite and Postgres stores, forgetting racing distillation,
//! re-embedding while in use, the harness and the memory tools.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jarvis_sdk::common::ManualClock;

mod bad_input;
mod forget_race;
mod harness;
mod permissions;
mod postgres;
mod prompt;
mod quality;
mod reembed;
mod sqlite;
mod stores;
mod tools;

/// A clock standing at 2026-11-29T00:00:00Z.
pub(crate) fn fixed_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_910_400),
    ))
}
