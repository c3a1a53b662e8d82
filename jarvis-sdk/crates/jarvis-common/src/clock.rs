//! Time and ids come in from the boundary (R-IDEM-4): inner logic asks a
//! [`Clock`] or an [`IdSource`] it was given and never reads the system clock
//! or a random source itself, so tests can pin both.

use std::fmt::Debug;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// A source of wall-clock time.
pub trait Clock: Send + Sync + Debug {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that only moves when told to; for tests and replays.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<SystemTime>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: SystemTime) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }

    /// Sets the clock to `to` (backwards too: a replay of dated events).
    pub fn set(&self, to: SystemTime) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A clock that started at a given time and runs on in real time: the
/// app's clock when `JARVIS_CLOCK__START` sets the time it starts at (a
/// demo set in another season, a test of what months do to memory).
#[derive(Debug)]
pub struct OffsetClock {
    start: SystemTime,
    since: std::time::Instant,
}

impl OffsetClock {
    /// A clock reading `start` now, and `start + elapsed` later.
    pub fn starting_at(start: SystemTime) -> Self {
        Self {
            start,
            since: std::time::Instant::now(),
        }
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> SystemTime {
        self.start + self.since.elapsed()
    }
}

/// A source of fresh identifiers.
pub trait IdSource: Send + Sync + Debug {
    /// A new identifier, unique for this source, starting with `prefix`.
    fn next_id(&self, prefix: &str) -> String;
}

/// Identifiers `<prefix><n>` with `n` counting up from 1; deterministic.
#[derive(Debug, Default)]
pub struct SequentialIds {
    next: AtomicU64,
}

impl IdSource for SequentialIds {
    fn next_id(&self, prefix: &str) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{prefix}{n}")
    }
}

/// Identifiers unique across processes and restarts: `<prefix><seed><n>`,
/// where the seed mixes the start time and the process id. The default for
/// ids the outside world did not supply (for example tool calls a provider
/// sent without one).
#[derive(Debug)]
pub struct UniqueIds {
    seed: String,
    next: AtomicU64,
}

impl UniqueIds {
    /// A source seeded from the clock and the process id.
    pub fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        let seed = nanos.rotate_left(17) ^ u64::from(std::process::id());
        Self {
            seed: format!("{:x}", seed & 0xffff_ffff_ffff),
            next: AtomicU64::new(0),
        }
    }
}

impl Default for UniqueIds {
    fn default() -> Self {
        Self::new()
    }
}

impl IdSource for UniqueIds {
    fn next_id(&self, prefix: &str) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{prefix}{}_{n}", self.seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(Duration::from_secs(5));
        assert_eq!(clock.now(), start + Duration::from_secs(5));
    }

    #[test]
    fn sequential_ids_count_from_one() {
        let ids = SequentialIds::default();
        assert_eq!(ids.next_id("call_"), "call_1");
        assert_eq!(ids.next_id("call_"), "call_2");
    }

    #[test]
    fn unique_ids_do_not_repeat() {
        let ids = UniqueIds::new();
        let a = ids.next_id("call_");
        let b = ids.next_id("call_");
        assert!(a.starts_with("call_") && a != b);
    }
}
