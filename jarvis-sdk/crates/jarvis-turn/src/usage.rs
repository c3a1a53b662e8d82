//! [`UsageLedger`]: the tokens and cost of every turn, in
//! `$JARVIS_HOME/usage.jsonl`, and [`UsageMeter`], which prices a turn's
//! usage and records it.
//!
//! The ledger is an append-only log, one JSON line per turn that called the
//! model:
//!
//! ```json
//! {"v":1,"ts":"2026-11-30T00:00:04.112Z","session_id":"default-main","agent_id":"main","turn_id":"t-3","model":"gpt-4o-mini","input_tokens":1200,"output_tokens":85,"cached_input_tokens":1024,"estimated":false,"cost_usd":0.0001542}
//! ```
//!
//! A row holds only the turn's own model calls: a delegated turn (in its
//! `peer-*` session) and a sub-agent's run write rows of their own, so sums
//! over rows never count a call twice. `cost_usd` is `null` when the model
//! has no price ([`PriceTable`]); a group of rows with any such row has an
//! unknown cost too, never a partial sum.
//!
//! On open the file is read once into in-memory aggregates (by agent, by
//! session, and by agent and minute, from which days in any zone are
//! summed), so every question is answered without reading the file again.
//! A damaged line, or a last line a crash cut short, is skipped with one
//! warning and the next append starts on a fresh line. Each record is one
//! `write` of the whole line to the file opened for appending.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use jarvis_common::{Clock, TimeZone, Timestamp};
use jarvis_model::{PriceTable, Usage};

/// The ledger's file name under `JARVIS_HOME`.
pub const USAGE_FILE: &str = "usage.jsonl";

/// The version of the ledger's lines.
const USAGE_VERSION: u32 = 1;

const MS_PER_MINUTE: i64 = 60_000;

/// A failure of the ledger's file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UsageError {
    /// The file could not be read or written.
    #[error("usage: could not {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// One turn's own model calls: a line of the ledger (without its `v`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    /// When the turn ended.
    pub ts: Timestamp,
    /// The turn's session.
    pub session_id: String,
    /// The agent that ran it (`main`, `karen`, `main.researcher`).
    pub agent_id: String,
    /// The turn's id.
    pub turn_id: String,
    /// The model, by the name requests sent.
    pub model: String,
    /// Tokens read, cached ones included.
    pub input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
    /// The part of `input_tokens` read from the prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Whether any count was estimated rather than reported by the provider.
    #[serde(default)]
    pub estimated: bool,
    /// What the calls cost in US dollars; `None` (`null`) when the model
    /// has no price.
    pub cost_usd: Option<f64>,
}

impl UsageRow {
    /// The row of turn `turn_id` of `agent_id` in `session_id`, which
    /// ended at `ts` having used `usage` of `model` for `cost_usd`.
    pub fn new(
        ts: Timestamp,
        session_id: impl Into<String>,
        agent_id: impl Into<String>,
        turn_id: impl Into<String>,
        model: impl Into<String>,
        usage: &Usage,
        cost_usd: Option<f64>,
    ) -> Self {
        Self {
            ts,
            session_id: session_id.into(),
            agent_id: agent_id.into(),
            turn_id: turn_id.into(),
            model: model.into(),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cached_input_tokens: usage.cached_input_tokens,
            estimated: usage.estimated,
            cost_usd,
        }
    }

    /// The row's counts as a [`Usage`].
    pub fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cached_input_tokens: self.cached_input_tokens,
            estimated: self.estimated,
        }
    }
}

/// A ledger line as written: the row behind its version.
#[derive(Serialize)]
struct LineOut<'a> {
    v: u32,
    #[serde(flatten)]
    row: &'a UsageRow,
}

/// A ledger line as read.
#[derive(Deserialize)]
struct LineIn {
    v: u32,
    #[serde(flatten)]
    row: UsageRow,
}

/// How [`UsageLedger::summary`] groups rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageBy {
    /// By agent id.
    #[default]
    Agent,
    /// By session id.
    Session,
    /// By calendar day (`YYYY-MM-DD`) in the person's zone.
    Day,
}

impl UsageBy {
    /// Every grouping, in the order people are offered them.
    pub const ALL: [UsageBy; 3] = [UsageBy::Agent, UsageBy::Session, UsageBy::Day];

    /// `agent`, `session` or `day`.
    pub fn as_str(self) -> &'static str {
        match self {
            UsageBy::Agent => "agent",
            UsageBy::Session => "session",
            UsageBy::Day => "day",
        }
    }

    /// The grouping named `name` (`agent`, `session` or `day`), if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|by| by.as_str() == name)
    }
}

impl fmt::Display for UsageBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One group of rows: what `GET /api/usage` and `jarvis usage` show per line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageSummary {
    /// The agent id, session id or day (`YYYY-MM-DD`).
    pub key: String,
    /// Turns that called the model.
    pub turns: u64,
    /// Tokens read, cached ones included.
    pub input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
    /// The part of `input_tokens` read from prompt caches.
    pub cached_input_tokens: u64,
    /// What the group cost in US dollars; `None` (`null`) when any of its
    /// rows has an unknown cost.
    pub cost_usd: Option<f64>,
}

/// What a session or an agent spent, for budgets.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Spent {
    /// Tokens read and written (input plus output).
    pub tokens: u64,
    /// US dollars; `None` when any counted turn has an unknown cost. With
    /// no turns at all, `Some(0.0)`.
    pub usd: Option<f64>,
    /// Turns counted.
    pub turns: u64,
}

/// The sums of some rows.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    turns: u64,
    input: u64,
    output: u64,
    cached: u64,
    dollars: f64,
    unknown_cost: bool,
}

impl Totals {
    fn add(&mut self, row: &UsageRow) {
        self.merge(&Totals {
            turns: 1,
            input: row.input_tokens,
            output: row.output_tokens,
            cached: row.cached_input_tokens,
            dollars: row.cost_usd.unwrap_or(0.0),
            unknown_cost: row.cost_usd.is_none(),
        });
    }

    fn merge(&mut self, other: &Totals) {
        self.turns = self.turns.saturating_add(other.turns);
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cached = self.cached.saturating_add(other.cached);
        self.dollars += other.dollars;
        self.unknown_cost |= other.unknown_cost;
    }

    fn usd(&self) -> Option<f64> {
        (!self.unknown_cost).then_some(self.dollars)
    }

    fn summary(&self, key: String) -> UsageSummary {
        UsageSummary {
            key,
            turns: self.turns,
            input_tokens: self.input,
            output_tokens: self.output,
            cached_input_tokens: self.cached,
            cost_usd: self.usd(),
        }
    }

    fn spent(&self) -> Spent {
        Spent {
            tokens: self.input.saturating_add(self.output),
            usd: self.usd(),
            turns: self.turns,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// The file, opened for appending (`None` in memory).
    file: Option<File>,
    /// The file ends inside a line: the next record starts a new one.
    torn_tail: bool,
    by_agent: BTreeMap<String, Totals>,
    by_session: BTreeMap<String, Totals>,
    /// Per agent, per minute since the epoch: a day in any zone whose
    /// offset is whole minutes is a range of whole minutes.
    agent_minutes: HashMap<String, BTreeMap<i64, Totals>>,
}

impl State {
    fn note(&mut self, row: &UsageRow) {
        self.by_agent.entry(row.agent_id.clone()).or_default().add(row);
        self.by_session
            .entry(row.session_id.clone())
            .or_default()
            .add(row);
        self.agent_minutes
            .entry(row.agent_id.clone())
            .or_default()
            .entry(row.ts.as_millis().div_euclid(MS_PER_MINUTE))
            .or_default()
            .add(row);
    }
}

/// The usage ledger; see the module docs. Every method takes
/// `&self`: share it as an `Arc`.
#[derive(Debug)]
pub struct UsageLedger {
    path: Option<PathBuf>,
    state: Mutex<State>,
}

impl UsageLedger {
    /// A ledger that keeps nothing on disk (tests, apps that keep their
    /// sessions in the process).
    pub fn in_memory() -> Self {
        Self {
            path: None,
            state: Mutex::default(),
        }
    }

    /// Opens (creating it when missing) the ledger at `path` and sums what
    /// it holds. Damaged lines are skipped with one warning; only a file
    /// that cannot be read or opened is an error.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, UsageError> {
        let path = path.into();
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| UsageError::Io { op, path, source }
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io("read", &path)(e)),
        };
        let mut state = State::default();
        let mut skipped = 0usize;
        let mut lines = bytes.split(|b| *b == b'\n').peekable();
        while let Some(line) = lines.next() {
            if lines.peek().is_none() {
                // After the last newline: empty, or a line a crash cut short.
                if !line.iter().all(u8::is_ascii_whitespace) {
                    skipped += 1;
                    state.torn_tail = true;
                }
                break;
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<LineIn>(line) {
                Ok(LineIn {
                    v: USAGE_VERSION,
                    row,
                }) => state.note(&row),
                _ => skipped += 1,
            }
        }
        if skipped > 0 {
            tracing::warn!(path = %path.display(), skipped, "usage: skipped damaged lines (a write cut short, or edited by hand); their turns are not counted");
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io("create the directory of", &path))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io("open", &path))?;
        state.file = Some(file);
        Ok(Self {
            path: Some(path),
            state: Mutex::new(state),
        })
    }

    /// The file, unless the ledger is in memory.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `row` (one write of the whole line, then a flush) and counts
    /// it. It is counted even when the line cannot be written: what a turn
    /// spent is spent, and budgets must see it; the error says the file
    /// lacks it.
    pub fn record(&self, row: &UsageRow) -> Result<(), UsageError> {
        let mut guard = self.lock();
        guard.note(row);
        let State { file, torn_tail, .. } = &mut *guard;
        let (Some(path), Some(file)) = (&self.path, file.as_mut()) else {
            return Ok(());
        };
        let mut line = Vec::with_capacity(256);
        if *torn_tail {
            line.push(b'\n');
        }
        serde_json::to_writer(
            &mut line,
            &LineOut {
                v: USAGE_VERSION,
                row,
            },
        )
        .map_err(|e| UsageError::Io {
            op: "encode a row for",
            path: path.clone(),
            source: e.into(),
        })?;
        line.push(b'\n');
        match file.write_all(&line).and_then(|()| file.flush()) {
            Ok(()) => {
                *torn_tail = false;
                Ok(())
            }
            Err(source) => {
                // Part of the line may be on disk: start the next one afresh.
                *torn_tail = true;
                Err(UsageError::Io {
                    op: "append to",
                    path: path.clone(),
                    source,
                })
            }
        }
    }

    /// Every group of rows `by` agent, session or day, sorted by key. Days
    /// are calendar days in `zone` (the person's; minutes east of UTC also
    /// do), keyed `YYYY-MM-DD`.
    pub fn summary(&self, by: UsageBy, zone: impl Into<TimeZone>) -> Vec<UsageSummary> {
        let zone = zone.into();
        let state = self.lock();
        let groups = match by {
            UsageBy::Agent => state.by_agent.clone(),
            UsageBy::Session => state.by_session.clone(),
            UsageBy::Day => {
                let mut days: BTreeMap<String, Totals> = BTreeMap::new();
                for minutes in state.agent_minutes.values() {
                    for (minute, totals) in minutes {
                        let at = Timestamp::from_millis(minute.saturating_mul(MS_PER_MINUTE));
                        days.entry(day_key(&zone, at)).or_default().merge(totals);
                    }
                }
                days.into_iter().collect()
            }
        };
        groups
            .into_iter()
            .map(|(key, totals)| totals.summary(key))
            .collect()
    }

    /// What every turn of `session_id` spent.
    pub fn session_spent(&self, session_id: &str) -> Spent {
        self.lock()
            .by_session
            .get(session_id)
            .map(Totals::spent)
            .unwrap_or(Spent {
                usd: Some(0.0),
                ..Spent::default()
            })
    }

    /// What `agent_id`'s turns spent on the calendar day in `zone` that
    /// contains `at` (for a daily budget: `at` is now, the zone the
    /// person's; a day may last 23 or 25 hours). A turn counts on the day it
    /// ended.
    pub fn agent_day_spent(&self, agent_id: &str, at: Timestamp, zone: impl Into<TimeZone>) -> Spent {
        let (start, end) = zone.into().day_bounds(at);
        let minute = |t: Timestamp| t.as_millis().div_euclid(MS_PER_MINUTE);
        let (start, end) = (minute(start), minute(end));
        let state = self.lock();
        let mut totals = Totals::default();
        if let Some(minutes) = state.agent_minutes.get(agent_id) {
            for day in minutes.range(start..end).map(|(_, t)| t) {
                totals.merge(day);
            }
        }
        totals.spent()
    }
}

/// `YYYY-MM-DD` of the local day in `zone` that contains `at`.
fn day_key(zone: &TimeZone, at: Timestamp) -> String {
    let civil = zone.civil(at);
    format!("{:04}-{:02}-{:02}", civil.year, civil.month, civil.day)
}

/// Prices each turn's usage and records it in a [`UsageLedger`]: one row
/// per turn that called the model, with only that turn's own calls. Every
/// session of an app holds one (see `AgentSessionParts::with_usage`); a
/// sub-agent's run records itself through it the same way.
#[derive(Clone)]
pub struct UsageMeter {
    ledger: Arc<UsageLedger>,
    prices: Arc<PriceTable>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for UsageMeter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UsageMeter")
            .field("ledger", &self.ledger.path())
            .field("prices", &self.prices.models().count())
            .finish_non_exhaustive()
    }
}

impl UsageMeter {
    /// A meter recording into `ledger`, pricing with `prices`, stamping
    /// rows with `clock`'s time.
    pub fn new(ledger: Arc<UsageLedger>, prices: Arc<PriceTable>, clock: Arc<dyn Clock>) -> Self {
        Self {
            ledger,
            prices,
            clock,
        }
    }

    /// The ledger.
    pub fn ledger(&self) -> &Arc<UsageLedger> {
        &self.ledger
    }

    /// The price table.
    pub fn prices(&self) -> &Arc<PriceTable> {
        &self.prices
    }

    /// The clock turns are dated by (and budgets' days are judged by).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Records turn `turn_id` of `agent_id` in `session_id`, which used
    /// `usage` of `model` (the name its requests sent), priced now, and
    /// answers the row. Never fails the turn: a row the file could not
    /// take is logged (and still counted in memory).
    pub fn record_turn(
        &self,
        session_id: &str,
        agent_id: &str,
        turn_id: &str,
        model: &str,
        usage: &Usage,
    ) -> UsageRow {
        let row = UsageRow::new(
            Timestamp::from_system_time(self.clock.now()),
            session_id,
            agent_id,
            turn_id,
            model,
            usage,
            self.prices.cost(model, usage),
        );
        if let Err(error) = self.ledger.record(&row) {
            tracing::warn!(%session_id, %turn_id, %error, "usage: the turn's row was not written; it is counted until the app stops");
        }
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_model::ModelPrice;

    /// 2026-11-29T14:59:00Z: 23:59 in Seoul (+09:00).
    const LATE: i64 = 1_795_964_340_000;

    fn row(
        ts: i64,
        session: &str,
        agent: &str,
        model: &str,
        input: u64,
        output: u64,
        cost: Option<f64>,
    ) -> UsageRow {
        UsageRow::new(
            Timestamp::from_millis(ts),
            session,
            agent,
            format!("t-{ts}"),
            model,
            &Usage::new(input, output),
            cost,
        )
    }

    #[test]
    fn the_day_constant_is_what_it_says() {
        assert_eq!(
            Timestamp::from_millis(LATE).to_string(),
            "2026-11-29T14:59:00.000Z"
        );
    }

    #[test]
    fn rows_survive_a_reopen_and_group_by_agent_session_and_day() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(USAGE_FILE);
        {
            let ledger = UsageLedger::open(&path).unwrap();
            ledger
                .record(&row(LATE, "default-main", "main", "m", 100, 10, Some(0.5)))
                .unwrap();
            // Two minutes later: the next day in Seoul, the same day in UTC.
            ledger
                .record(&row(
                    LATE + 120_000,
                    "default-main",
                    "main",
                    "m",
                    50,
                    5,
                    Some(0.25),
                ))
                .unwrap();
            ledger
                .record(&row(
                    LATE + 180_000,
                    "peer-main-karen",
                    "karen",
                    "local",
                    7,
                    3,
                    None,
                ))
                .unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let first = text.lines().next().unwrap();
        assert!(
            first.starts_with(r#"{"v":1,"ts":"2026-11-29T14:59:00.000Z","session_id":"default-main","agent_id":"main","turn_id":"#),
            "{first}"
        );
        assert!(
            text.lines()
                .nth(2)
                .unwrap()
                .ends_with(r#""estimated":false,"cost_usd":null}"#)
        );

        let ledger = UsageLedger::open(&path).unwrap();
        let agents = ledger.summary(UsageBy::Agent, 540);
        assert_eq!(
            agents,
            vec![
                UsageSummary {
                    key: "karen".into(),
                    turns: 1,
                    input_tokens: 7,
                    output_tokens: 3,
                    cached_input_tokens: 0,
                    cost_usd: None,
                },
                UsageSummary {
                    key: "main".into(),
                    turns: 2,
                    input_tokens: 150,
                    output_tokens: 15,
                    cached_input_tokens: 0,
                    cost_usd: Some(0.75),
                },
            ]
        );
        let sessions: Vec<_> = ledger
            .summary(UsageBy::Session, 540)
            .into_iter()
            .map(|s| (s.key, s.turns))
            .collect();
        assert_eq!(
            sessions,
            [("default-main".into(), 2), ("peer-main-karen".into(), 1)]
        );
        let seoul: Vec<_> = ledger
            .summary(UsageBy::Day, 540)
            .into_iter()
            .map(|s| (s.key, s.turns, s.cost_usd))
            .collect();
        assert_eq!(
            seoul,
            [
                ("2026-11-29".into(), 1, Some(0.5)),
                ("2026-11-30".into(), 2, None)
            ]
        );
        let utc: Vec<_> = ledger
            .summary(UsageBy::Day, 0)
            .into_iter()
            .map(|s| (s.key, s.turns))
            .collect();
        assert_eq!(utc, [("2026-11-29".into(), 3)]);
    }

    #[test]
    fn spending_is_answered_per_session_and_per_agent_day() {
        let ledger = UsageLedger::in_memory();
        assert_eq!(
            ledger.session_spent("nowhere"),
            Spent {
                tokens: 0,
                usd: Some(0.0),
                turns: 0
            }
        );
        ledger
            .record(&row(LATE, "s1", "main", "m", 100, 10, Some(0.5)))
            .unwrap();
        ledger
            .record(&row(LATE + 60_000, "s1", "main", "m", 50, 5, Some(0.25)))
            .unwrap();
        ledger
            .record(&row(LATE + 60_000, "s2", "main", "x", 1, 1, None))
            .unwrap();
        assert_eq!(
            ledger.session_spent("s1"),
            Spent {
                tokens: 165,
                usd: Some(0.75),
                turns: 2
            }
        );
        assert_eq!(ledger.session_spent("s2").usd, None);
        // In Seoul, 23:59 is one day and 00:00 the next.
        let day = |at: i64| ledger.agent_day_spent("main", Timestamp::from_millis(at), 540);
        assert_eq!(
            day(LATE - 3_600_000),
            Spent {
                tokens: 110,
                usd: Some(0.5),
                turns: 1
            }
        );
        assert_eq!(day(LATE + 60_000).turns, 2);
        assert_eq!(day(LATE + 60_000).usd, None);
        assert_eq!(
            ledger
                .agent_day_spent("main", Timestamp::from_millis(LATE), 0)
                .turns,
            3
        );
        assert_eq!(
            ledger.agent_day_spent("karen", Timestamp::from_millis(LATE), 0),
            Spent {
                tokens: 0,
                usd: Some(0.0),
                turns: 0
            }
        );
    }

    #[test]
    fn damaged_and_torn_lines_are_skipped_and_the_next_row_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(USAGE_FILE);
        let good = serde_json::to_string(&LineOut {
            v: 1,
            row: &row(LATE, "s", "main", "m", 1, 2, Some(0.0)),
        })
        .unwrap();
        let future = good.replacen("\"v\":1", "\"v\":2", 1);
        std::fs::write(
            &path,
            format!("{good}\nnot json\n\n{future}\n{good}\n{{\"v\":1,\"ts\":\"2026-"),
        )
        .unwrap();
        let ledger = UsageLedger::open(&path).unwrap();
        assert_eq!(ledger.summary(UsageBy::Agent, 0)[0].turns, 2);
        ledger
            .record(&row(LATE, "s", "main", "m", 1, 2, Some(0.0)))
            .unwrap();
        drop(ledger);
        let ledger = UsageLedger::open(&path).unwrap();
        assert_eq!(
            ledger.summary(UsageBy::Agent, 0)[0].turns,
            3,
            "the row after the torn line reads back"
        );
    }

    #[test]
    fn a_meter_prices_rows_and_leaves_unpriced_models_unknown() {
        let prices = PriceTable::new().with_price(
            "m",
            ModelPrice {
                input: 2.0,
                output: 8.0,
                cached_input: Some(0.5),
            },
        );
        let meter = UsageMeter::new(
            Arc::new(UsageLedger::in_memory()),
            Arc::new(prices),
            Arc::new(jarvis_common::ManualClock::new(
                Timestamp::from_millis(LATE).to_system_time(),
            )),
        );
        let usage = Usage::new(1_000_000, 250_000).with_cached_input(500_000);
        let priced = meter.record_turn("s", "main", "t-1", "m", &usage);
        assert_eq!(priced.cost_usd, Some(3.25));
        assert_eq!(priced.ts, Timestamp::from_millis(LATE));
        assert_eq!(priced.usage(), usage);
        let unknown = meter.record_turn("s", "main", "t-2", "other", &usage.estimated());
        assert_eq!(unknown.cost_usd, None);
        assert!(unknown.estimated);
        let summary = meter.ledger().summary(UsageBy::Session, 0);
        assert_eq!(
            summary[0].cost_usd, None,
            "one unknown cost makes the sum unknown"
        );
        assert_eq!(summary[0].cached_input_tokens, 1_000_000);
    }

    #[test]
    fn groupings_are_named_agent_session_and_day() {
        for by in UsageBy::ALL {
            assert_eq!(UsageBy::parse(by.as_str()), Some(by));
            assert_eq!(serde_json::to_value(by).unwrap(), by.as_str());
        }
        assert_eq!(UsageBy::parse("week"), None);
        assert_eq!(UsageBy::default(), UsageBy::Agent);
    }
}
