//! The JSONL store on bad input and damaged files: each case gives a clear
//! warning or error and loses no other entry. Also: the home lock, ids that
//! cannot leave the folder, and a recent window that never re-reads history.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jarvis_sdk::agent::{
    JsonlOptions, JsonlSessionStore, NewSession, SessionEntry, SessionError, SessionId, SessionStore,
};
use jarvis_sdk::common::ManualClock;
use jarvis_sdk::model::Message;

use crate::capture::capture;
use crate::sessions_contract::{id, msg, start_time, turn};

struct Home {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
}

impl Home {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            clock: Arc::new(ManualClock::new(start_time())),
        }
    }

    fn options(&self) -> JsonlOptions {
        JsonlOptions::default().clock(self.clock.clone())
    }

    fn open(&self) -> JsonlSessionStore {
        self.open_with(self.options())
    }

    fn open_with(&self, options: JsonlOptions) -> JsonlSessionStore {
        JsonlSessionStore::open_with(self.dir.path(), options).unwrap()
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join("sessions").join(format!("{name}.jsonl"))
    }

    fn meta(&self, name: &str) -> PathBuf {
        self.dir.path().join("sessions").join(format!("{name}.meta.json"))
    }

    /// A session `name` of `main` with `turns` whole turns, the store closed.
    async fn with_turns(&self, name: &str, turns: usize) -> Vec<SessionEntry> {
        let store = self.open();
        store.create(NewSession::user(id(name), "main")).await.unwrap();
        for n in 1..=turns {
            store.append(&id(name), turn(n)).await.unwrap();
        }
        store.entries(&id(name)).await.unwrap()
    }
}

fn append_raw(path: &Path, bytes: &[u8]) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

fn line_of(entry: &SessionEntry) -> Vec<u8> {
    let mut line = serde_json::to_vec(entry).unwrap();
    line.push(b'\n');
    line
}

#[tokio::test]
async fn a_torn_last_line_is_cut_off_and_reported() {
    let home = Home::new();
    let before = home.with_turns("s", 3).await;
    let clean_len = std::fs::metadata(home.log("s")).unwrap().len();
    let torn =
        br#"{"v":1,"seq":19,"ts":"2026-11-29T19:45:05.123Z","kind":"message","message":{"role":"user","con"#;
    append_raw(&home.log("s"), torn);

    let (logs, _guard) = capture();
    let store = home.open();
    assert_eq!(store.entries(&id("s")).await.unwrap(), before);
    let report = store.load_report(&id("s")).await.unwrap();
    assert_eq!(report.torn_bytes, torn.len() as u64);
    assert_eq!((report.entries, report.skipped_lines), (18, 0));
    assert!(
        logs.warned(&["torn last line", &torn.len().to_string()]),
        "{:?}",
        logs.lines()
    );
    assert_eq!(
        std::fs::metadata(home.log("s")).unwrap().len(),
        clean_len,
        "cut off on disk"
    );

    assert_eq!(
        store.append(&id("s"), turn(4)).await.unwrap(),
        24,
        "numbering goes on"
    );
    drop(store);
    let store = home.open();
    assert_eq!(store.entries(&id("s")).await.unwrap().len(), 24);
    assert_eq!(store.load_report(&id("s")).await.unwrap().torn_bytes, 0);
}

#[tokio::test]
async fn a_whole_last_line_without_its_newline_is_kept() {
    let home = Home::new();
    let mut entries = home.with_turns("s", 1).await;
    let mut extra = entries[1].clone();
    extra.seq = 7;
    let mut line = line_of(&extra);
    line.pop();
    append_raw(&home.log("s"), &line);

    let (logs, _guard) = capture();
    let store = home.open();
    entries.push(extra);
    assert_eq!(store.entries(&id("s")).await.unwrap(), entries);
    assert!(store.load_report(&id("s")).await.unwrap().repaired_newline);
    assert!(logs.warned(&["missing newline"]), "{:?}", logs.lines());
    store.append(&id("s"), turn(2)).await.unwrap();
    drop(store);
    let store = home.open();
    assert_eq!(store.entries(&id("s")).await.unwrap().len(), 13);
    assert_eq!(store.load_report(&id("s")).await.unwrap().skipped_lines, 0);
}

#[tokio::test]
async fn damaged_lines_in_the_middle_are_skipped_and_counted() {
    let home = Home::new();
    let first = home.with_turns("s", 2).await;
    let damaged: [&[u8]; 6] = [
        b"{\"v\":1,\"seq\":\n",
        b"\xff\xfe{\"v\":1}\n",
        b"{\"v\":1,\"seq\":13,\"ts\":\"2026-11-29T19:45:05.123Z\",\"kind\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"\xc3\x28\"}}\n",
        b"{\"v\":2,\"seq\":13,\"ts\":\"2026-11-29T19:45:05.123Z\",\"kind\":\"turn_start\"}\n",
        b"{\"v\":1,\"seq\":13,\"ts\":\"2026-11-29T19:45:05.123Z\",\"kind\":\"alien\"}\n",
        b"\n",
    ];
    for bad in damaged {
        append_raw(&home.log("s"), bad);
    }
    let (logs, _guard) = capture();
    let store = home.open();
    let all = store.entries(&id("s")).await.unwrap();
    assert_eq!(all[..12], first[..]);
    let report = store.load_report(&id("s")).await.unwrap();
    assert_eq!(report.skipped_lines, 6, "{report:?}");
    assert_eq!(report.torn_bytes, 0);
    for line in 13..=18 {
        assert!(
            logs.warned(&["skipped damaged line", &format!("line {line} of")]),
            "line {line}: {:?}",
            logs.lines()
        );
    }
    assert!(logs.warned(&["unknown schema version 2"]));
    // The session goes on after the damage.
    assert_eq!(store.append(&id("s"), turn(4)).await.unwrap(), 18);
    let window = store.recent(&id("s"), 2).await.unwrap();
    assert_eq!(window[0].body, msg(Message::user("question 2")));
    assert_eq!(window.last().unwrap().seq, 18);
}

#[tokio::test]
async fn a_50_mb_line_loses_no_other_entry() {
    let home = Home::new();
    home.with_turns("s", 1).await;
    let mut garbage = vec![b'x'; 50 << 20];
    garbage.push(b'\n');
    append_raw(&home.log("s"), &garbage);
    drop(garbage);
    {
        let store = home.open();
        store.append(&id("s"), turn(2)).await.unwrap();
    }

    // Under the default 64 MiB limit the line is read and refused as JSON.
    let (logs, _guard) = capture();
    let store = home.open();
    assert_eq!(store.entries(&id("s")).await.unwrap().len(), 12);
    assert_eq!(store.load_report(&id("s")).await.unwrap().skipped_lines, 1);
    drop(store);

    // Under a 1 MiB limit it is stepped over without being held in memory.
    let store = home.open_with(home.options().max_line_bytes(1 << 20));
    assert_eq!(store.entries(&id("s")).await.unwrap().len(), 12);
    let report = store.load_report(&id("s")).await.unwrap();
    assert_eq!((report.oversized_lines, report.skipped_lines), (1, 0));
    assert!(logs.warned(&["over the limit of 1048576"]), "{:?}", logs.lines());

    // An entry over the limit is refused before anything is written.
    let len = std::fs::metadata(home.log("s")).unwrap().len();
    let big = vec![msg(Message::user("y".repeat(2 << 20)))];
    let err = store.append(&id("s"), big).await.unwrap_err();
    assert!(matches!(err, SessionError::EntryTooLarge { .. }), "{err}");
    assert!(err.is_invalid_input());
    assert_eq!(std::fs::metadata(home.log("s")).unwrap().len(), len);
    assert_eq!(store.append(&id("s"), turn(3)).await.unwrap(), 18);
    drop(store);

    // A real 50 MB entry under the default limit is stored and read back.
    let store = home.open();
    let huge = "한".repeat((50 << 20) / 3);
    store
        .append(&id("s"), vec![msg(Message::user(huge.clone()))])
        .await
        .unwrap();
    drop(store);
    let store = home.open();
    let all = store.entries(&id("s")).await.unwrap();
    assert_eq!(all.len(), 19);
    assert_eq!(all[18].body, msg(Message::user(huge)));
    assert_eq!(store.recent(&id("s"), 1).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_history_without_metadata_belongs_to_main() {
    let home = Home::new();
    let entries = home.with_turns("legacy", 2).await;
    std::fs::remove_file(home.meta("legacy")).unwrap();

    let (logs, _guard) = capture();
    let store = home.open();
    let meta = store.get(&id("legacy")).await.unwrap().unwrap();
    assert_eq!(meta.agent_id, "main");
    assert_eq!(meta.created_at, entries[0].ts);
    assert_eq!(meta.updated_at, entries.last().unwrap().ts);
    assert_eq!(store.entries(&id("legacy")).await.unwrap(), entries);
    assert!(store.load_report(&id("legacy")).await.unwrap().missing_meta);
    assert!(logs.warned(&[
        "session legacy has no metadata file",
        "legacy session of agent main"
    ]));
    assert_eq!(store.list().await.unwrap().len(), 1);
    assert!(!home.meta("legacy").exists(), "reading changes nothing on disk");
    // Giving it a title writes its metadata, still as main's.
    store.set_title(&id("legacy"), Some("Old".into())).await.unwrap();
    drop(store);
    let store = home.open();
    assert_eq!(store.get(&id("legacy")).await.unwrap().unwrap().agent_id, "main");
    assert!(!store.load_report(&id("legacy")).await.unwrap().missing_meta);
}

#[tokio::test]
async fn metadata_naming_an_unknown_agent_is_reported_not_hidden() {
    let home = Home::new();
    let entries = home.with_turns("s", 1).await;
    let meta = std::fs::read_to_string(home.meta("s")).unwrap();
    std::fs::write(home.meta("s"), meta.replace("\"main\"", "\"ghost\"")).unwrap();

    let (logs, _guard) = capture();
    let store = home.open();
    let meta = store.get(&id("s")).await.unwrap().unwrap();
    assert_eq!(meta.agent_id, "ghost");
    assert_eq!(store.entries(&id("s")).await.unwrap(), entries);
    let known = |a: &str| a == "main";
    let err = meta.check_agent(known).unwrap_err();
    assert_eq!(
        err.to_string(),
        "session store: session s belongs to agent \"ghost\", which is not defined"
    );
    let unknown = store.unknown_agents(&known).await.unwrap();
    assert_eq!(unknown, vec![meta]);
    assert!(logs.warned(&["session s", "\"ghost\""]));
}

#[tokio::test]
async fn damaged_metadata_is_a_clear_error_and_the_list_goes_on() {
    let home = Home::new();
    home.with_turns("bad", 1).await;
    home.with_turns("good", 1).await;
    std::fs::write(home.meta("bad"), b"{ not json").unwrap();
    let log_before = std::fs::read(home.log("bad")).unwrap();

    let (logs, _guard) = capture();
    let store = home.open();
    let err = store.get(&id("bad")).await.unwrap_err();
    assert!(matches!(err, SessionError::CorruptMeta { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("session store: the metadata of session bad in ")
    );
    assert!(
        std::error::Error::source(&err).is_some(),
        "the parse error is chained"
    );
    let listed: Vec<String> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id.to_string())
        .collect();
    assert_eq!(listed, ["good"]);
    assert!(
        logs.warned(&["left session bad out of the list", "damaged"]),
        "{:?}",
        logs.lines()
    );
    assert!(
        store.append(&id("bad"), turn(2)).await.is_err(),
        "no writes to a session of unknown owner"
    );
    assert_eq!(
        std::fs::read(home.log("bad")).unwrap(),
        log_before,
        "its history is untouched"
    );
}

#[tokio::test]
async fn one_process_owns_a_home() {
    let home = Home::new();
    let first = home.open();
    let err = JsonlSessionStore::open(home.dir.path()).unwrap_err();
    assert!(matches!(err, SessionError::Lock(_)), "{err:?}");
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert!(
        source.contains(&format!("process {}", std::process::id())),
        "{source}"
    );
    assert!(source.contains("jarvis.lock"), "{source}");
    drop(first);
    home.open();
}

#[tokio::test]
async fn stray_files_and_foreign_names_are_ignored() {
    let home = Home::new();
    home.with_turns("s", 1).await;
    let sessions = home.dir.path().join("sessions");
    for name in [
        "notes.txt",
        ".s.meta.json.123.tmp",
        "bad name.jsonl",
        "..jsonl",
        "x.y.jsonl",
    ] {
        std::fs::write(sessions.join(name), b"{}").unwrap();
    }
    let store = home.open();
    let listed: Vec<SessionId> = store.list().await.unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!(listed, vec![id("s")]);
    for bad in ["../s", "s/../../x", "..", "a\\b", ""] {
        assert!(SessionId::new(bad).is_err(), "{bad:?}");
    }
}

#[tokio::test]
async fn the_recent_window_never_rereads_the_history() {
    let home = Home::new();
    let options = home.options().cache_turns(4);
    let store = home.open_with(options.clone());
    store.create(NewSession::user(id("s"), "main")).await.unwrap();
    for n in 1..=20 {
        store.append(&id("s"), turn(n)).await.unwrap();
    }
    // Wreck the first half of the file behind the store's back, keeping its length.
    let bytes = std::fs::read(home.log("s")).unwrap();
    let mut wrecked = vec![b'#'; bytes.len() / 2];
    wrecked.extend_from_slice(&bytes[bytes.len() / 2..]);
    std::fs::write(home.log("s"), &wrecked).unwrap();

    // Windows within the cache read no file; wider ones read from their first turn on.
    let three = store.recent(&id("s"), 3).await.unwrap();
    assert_eq!(three[0].body, msg(Message::user("question 18")));
    let six = store.recent(&id("s"), 6).await.unwrap();
    assert_eq!(six[0].body, msg(Message::user("question 15")));
    assert_eq!(six.len(), 35);
    assert!(
        store.entries(&id("s")).await.unwrap().len() < 120,
        "the whole read sees the damage"
    );
}

#[tokio::test]
async fn a_failed_write_is_an_error_and_the_session_refuses_more() {
    let home = Home::new();
    let store = home.open();
    store.create(NewSession::user(id("s"), "main")).await.unwrap();
    // The history file is a device that is always full.
    std::fs::remove_file(home.log("s")).unwrap();
    std::os::unix::fs::symlink("/dev/full", home.log("s")).unwrap();
    let err = store.append(&id("s"), turn(1)).await.unwrap_err();
    assert!(
        err.to_string().starts_with("session store: cannot append to "),
        "{err}"
    );
    let err = store.append(&id("s"), turn(1)).await.unwrap_err();
    assert!(matches!(err, SessionError::Poisoned { .. }), "{err:?}");
    assert_eq!(
        store.entries(&id("s")).await.unwrap(),
        vec![],
        "nothing was recorded"
    );
}

#[tokio::test]
async fn durable_and_fast_modes_store_the_same() {
    use jarvis_sdk::agent::Durability;
    for durability in [Durability::EndOfTurn, Durability::Never] {
        let home = Home::new();
        let store = home.open_with(home.options().durability(durability));
        store.create(NewSession::user(id("s"), "main")).await.unwrap();
        store.append(&id("s"), turn(1)).await.unwrap();
        store.sync(&id("s")).await.unwrap();
        store.sync(&id("s")).await.unwrap();
        assert!(store.sync(&id("nope")).await.unwrap_err().is_not_found());
        drop(store);
        assert_eq!(home.open().entries(&id("s")).await.unwrap().len(), 6);
    }
}

#[tokio::test]
async fn a_synced_turn_survives_a_history_that_lost_its_tail_and_replaying_twice_changes_nothing() {
    use jarvis_sdk::agent::{EntryBody, JsonlSessionStore, NewSession, SessionId, SessionStore};
    use jarvis_sdk::model::Message;
    let home = tempfile::tempdir().unwrap();
    let id = SessionId::new("s-wal").unwrap();
    let path = home.path().join("sessions/s-wal.jsonl");
    let kept = {
        let store = JsonlSessionStore::open(home.path()).unwrap();
        store.create(NewSession::user(id.clone(), "main")).await.unwrap();
        store
            .append(&id, vec![EntryBody::message(Message::user("첫 번째"))])
            .await
            .unwrap();
        store.sync(&id).await.unwrap();
        let kept = std::fs::metadata(&path).unwrap().len();
        store
            .append(
                &id,
                vec![
                    EntryBody::message(Message::user("두 번째")),
                    EntryBody::message(Message::assistant_text("답")),
                ],
            )
            .await
            .unwrap();
        store.sync(&id).await.unwrap();
        kept
    };
    // A power loss took the history's unsynced tail (the log has it), and
    // tore a line in the middle of writing it.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(kept as usize);
    bytes.extend_from_slice(b"{\"v\":1,\"seq\":2,\"ts\":");
    std::fs::write(&path, &bytes).unwrap();
    for _ in 0..2 {
        let store = JsonlSessionStore::open(home.path()).unwrap();
        let entries = store.entries(&id).await.unwrap();
        let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3], "replayed once, in order");
        assert_eq!(entries[2].message(), Some(&Message::assistant_text("답")));
    }
}
