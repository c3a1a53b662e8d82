//! Crash safety of the JSONL store: a child process runs turns through the
//! harness (fsync at the end of every turn) and is killed with SIGKILL at
//! random moments, chosen without looking at what it is doing. After every
//! kill the sessions reopen, no entry is torn, and every turn the child
//! reported complete is there.
//!
//! The child is this test binary run again with `JARVIS_CRASH_HOME` set; it
//! reports each turn on its standard output after the turn (its sync
//! included) returned. Prompts are large, so that many kills land in the
//! middle of a write; the test counts them (a kill that left a torn line
//! behind). Where writes are fast next to the sync that follows them, few
//! kills land inside one, so past [`KILLS`] it goes on killing until one
//! has (up to [`MAX_KILLS`]), and fails if none did, since it would then
//! prove nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use jarvis_sdk::CancellationToken;
use jarvis_sdk::agent::{
    AgentIdentity, EntryBody, Harness, JsonlSessionStore, LoopContext, NewSession, SessionEntry, SessionId,
    SessionStore,
};
use jarvis_sdk::model::{FauxProvider, FauxReply, FauxScript, Message};

const HOME_ENV: &str = "JARVIS_CRASH_HOME";
const SESSIONS_ENV: &str = "JARVIS_CRASH_SESSIONS";
const SEED_ENV: &str = "JARVIS_CRASH_SEED";
const DONE: &str = "jarvis-crash-done";
/// Kills every run makes.
const KILLS: usize = 60;
/// Kills a run may make while none has yet landed in the middle of a write.
const MAX_KILLS: usize = 600;

/// xorshift64*: enough randomness for kill moments and sizes, reproducible
/// from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low)
    }
}

fn prompt(session: &str, n: usize, size: usize) -> String {
    let head = format!("turn {n} of {session} ");
    let tail = format!(" end {n}");
    let filler = "0123456789abcdef".repeat(size / 16);
    format!("{head}{filler}{tail}")
}

/// The child: runs turns on its sessions until it is killed.
#[test]
fn crash_child() {
    let Ok(home) = std::env::var(HOME_ENV) else {
        return; // an ordinary test run: nothing to do
    };
    let sessions: Vec<SessionId> = std::env::var(SESSIONS_ENV)
        .unwrap()
        .split(',')
        .map(|s| SessionId::new(s).unwrap())
        .collect();
    let seed: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = Arc::new(JsonlSessionStore::open(&home).unwrap());
        let faux = Arc::new(
            FauxProvider::new(FauxScript::new().fallback(FauxReply::text("noted")))
                .unwrap()
                .without_recording(),
        );
        let started = Instant::now();
        let writers = sessions.into_iter().enumerate().map(|(i, sid)| {
            let store = store.clone();
            let ctx = LoopContext::new(faux.clone()).with_identity(AgentIdentity::default());
            tokio::spawn(async move {
                store
                    .get_or_create(NewSession::user(sid.clone(), "main"))
                    .await
                    .unwrap();
                let mut n = store
                    .entries(&sid)
                    .await
                    .unwrap()
                    .iter()
                    .filter(|e| e.starts_turn())
                    .count();
                let harness = Harness::new(store, ctx);
                let mut rng = Rng(seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                // A safety stop, should the parent ever fail to kill us.
                while started.elapsed() < Duration::from_secs(60) {
                    n += 1;
                    let size = rng.range(256 << 10, 3 << 20) as usize;
                    let text = prompt(sid.as_str(), n, size);
                    harness
                        .run_turn(&sid, text, &CancellationToken::new())
                        .await
                        .unwrap();
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "{DONE} {sid} {n}").unwrap();
                    out.flush().unwrap();
                }
            })
        });
        for writer in futures::future::join_all(writers).await {
            writer.unwrap();
        }
    });
}

/// What one session holds after a reopen.
struct Checked {
    turns: BTreeSet<usize>,
    ended_mid_turn: bool,
}

/// Checks one reopened session: whole entries numbered 1, 2, …, whole
/// prompts, and every reported turn present and ended.
fn check(sid: &str, entries: &[SessionEntry], reported: &BTreeSet<usize>) -> Checked {
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=entries.len() as u64).collect::<Vec<_>>(),
        "{sid}: gaps in seq"
    );
    let mut ended = BTreeSet::new();
    let mut turns = BTreeSet::new();
    let mut current = None;
    for e in entries {
        match &e.body {
            EntryBody::Message {
                message: Message::User(u),
            } => {
                let head = u.content.split(' ').take(4).collect::<Vec<_>>();
                assert_eq!(head[..1], ["turn"], "{sid}: a torn prompt");
                let n: usize = head[1].parse().unwrap();
                assert_eq!(head[2..], ["of", sid], "{sid}: prompt of another session");
                assert!(
                    u.content.ends_with(&format!(" end {n}")),
                    "{sid}: prompt {n} is cut"
                );
                assert!(turns.insert(n), "{sid}: turn {n} twice");
                assert!(turns.iter().all(|&t| t <= n), "{sid}: turns out of order");
                current = Some(n);
            }
            EntryBody::TurnEnd { .. } => {
                if let Some(n) = current.take() {
                    ended.insert(n);
                }
            }
            _ => {}
        }
    }
    for n in reported {
        assert!(
            ended.contains(n),
            "{sid}: turn {n} was reported complete but is missing or unfinished"
        );
    }
    let ended_mid_turn = !matches!(
        entries.last().map(|e| &e.body),
        None | Some(EntryBody::TurnEnd { .. })
    );
    Checked {
        turns,
        ended_mid_turn,
    }
}

#[test]
fn sigkill_at_random_moments_loses_no_completed_turn() {
    if std::env::var(HOME_ENV).is_ok() {
        return; // inside a child
    }
    let seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    let mut rng = Rng(seed);
    let home = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut reported: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    let (mut torn_kills, mut mid_turn_kills, mut turns_done) = (0, 0, 0);

    let mut kill = 0;
    while kill < KILLS || (torn_kills == 0 && kill < MAX_KILLS) {
        // Each session is written by two children in a row: the second
        // carries on from what the first left behind.
        let mut sessions = vec![format!("crash-{kill}")];
        if kill > 0 {
            sessions.push(format!("crash-{}", kill - 1));
        }
        let mut child = Command::new(&exe)
            .args([
                "sessions_crash::crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HOME_ENV, home.path())
            .env(SESSIONS_ENV, sessions.join(","))
            .env(SEED_ENV, rng.next().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| {
                    // Found anywhere in a line: the test harness's `test … ... `
                    // comes before the first one, on the same line.
                    let mut parts = l[l.find(DONE)? + DONE.len()..].split_whitespace();
                    Some((parts.next()?.to_owned(), parts.next()?.parse::<usize>().ok()?))
                })
                .collect::<Vec<_>>()
        });
        // The kill moment is drawn at random; it does not depend on what the
        // child is doing (this wait is the experiment, not a synchronisation).
        std::thread::sleep(Duration::from_millis(rng.range(10, 200)));
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the child stopped on its own ({status}) before kill {kill}");
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(9), "kill {kill}: {status}");
        for (sid, n) in reader.join().unwrap() {
            reported.entry(sid).or_default().insert(n);
            turns_done += 1;
        }

        let store = JsonlSessionStore::open(home.path()).unwrap();
        let (mut torn, mut mid_turn) = (false, false);
        for sid in &sessions {
            let id = SessionId::new(sid.as_str()).unwrap();
            runtime.block_on(async {
                if store.get(&id).await.unwrap().is_none() {
                    return; // killed before it was created
                }
                let report = store.load_report(&id).await.unwrap();
                assert_eq!(
                    (report.skipped_lines, report.oversized_lines),
                    (0, 0),
                    "{sid}: {report:?}"
                );
                torn |= report.torn_bytes > 0;
                let entries = store.entries(&id).await.unwrap();
                let empty = BTreeSet::new();
                mid_turn |= check(sid, &entries, reported.get(sid).unwrap_or(&empty)).ended_mid_turn;
            });
        }
        torn_kills += usize::from(torn);
        mid_turn_kills += usize::from(mid_turn);
        kill += 1;
    }

    // Finally every session once more, from a fresh open.
    let store = JsonlSessionStore::open(home.path()).unwrap();
    let sessions = runtime.block_on(store.list()).unwrap();
    for meta in &sessions {
        let entries = runtime.block_on(store.entries(&meta.id)).unwrap();
        let empty = BTreeSet::new();
        let sid = meta.id.as_str();
        let checked = check(sid, &entries, reported.get(sid).unwrap_or(&empty));
        assert!(checked.turns.len() >= reported.get(sid).map_or(0, BTreeSet::len));
    }
    let summary = format!(
        "crash test (seed {seed}): {kill} SIGKILLs, {torn_kills} landed in the middle of a write \
         (torn line cut off on reopen), {mid_turn_kills} in the middle of a turn; \
         {turns_done} turns reported complete, all present; {} sessions reopened",
        sessions.len()
    );
    let _ = writeln!(std::io::stderr(), "{summary}");
    assert!(
        torn_kills > 0,
        "no kill landed in the middle of a write, so this proved nothing: {summary}"
    );
}
