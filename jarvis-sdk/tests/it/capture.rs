//! Captures `tracing` events of the current thread, so tests can assert on
//! the warnings the SDK logs.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The events logged while the guard lives, as `LEVEL message key=value…`.
#[derive(Clone, Default)]
pub(crate) struct Logs(Arc<Mutex<Vec<String>>>);

impl Logs {
    /// Every line so far.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// The warnings so far.
    pub(crate) fn warnings(&self) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.starts_with("WARN "))
            .collect()
    }

    /// Whether some warning contains every one of `needles`.
    pub(crate) fn warned(&self, needles: &[&str]) -> bool {
        self.warnings()
            .iter()
            .any(|w| needles.iter().all(|n| w.contains(n)))
    }
}

struct Capture(Logs);

struct Text<'a>(&'a mut String);

impl Visit for Text<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut line = format!("{} ", event.metadata().level());
        event.record(&mut Text(&mut line));
        self.0.0.lock().unwrap().push(line);
    }
}

/// Starts capturing on this thread (and on the SDK's blocking tasks started
/// from it) until the guard drops.
pub(crate) fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::registry().with(Capture(logs.clone()));
    let guard = tracing::subscriber::set_default(subscriber);
    (logs, guard)
}
