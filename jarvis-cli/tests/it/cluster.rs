//! Three `jarvis` processes on one Postgres, each with its own home, as a
//! deployment runs them: a screen on one node prompts a session another
//! node owns and sees its turn stream; an approval answered on a third
//! node resolves it; and when the owner is SIGKILLed, the session answers
//! on another node once the owner's lease has run out, with every
//! completed turn in the history once. A job in every node's `schedules/`
//! runs once across the three.

use jarvis_sdk::testing::TempPostgres;
use jarvis_sdk::{PostgresSessionStore, SessionId, SessionStore};
use jarvis_server::protocol::ClientDecision;
use serde_json::Value;
use std::time::{Duration, Instant};

use crate::durability::{Home, MEMO, Ws, is_end, kind, runtime};

/// The nodes' lease: short, so the takeover is quick to test.
const LEASE_SECS: f64 = 1.0;

fn texts_of(frames: &[Value], of_kind: &str) -> Vec<String> {
    frames
        .iter()
        .filter(|f| kind(f) == of_kind)
        .map(|f| f.to_string())
        .collect()
}

/// Whether `name` is a file somewhere under `dir`.
fn holds(dir: &std::path::Path, name: &str) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let path = entry.path();
            if path.is_dir() {
                holds(&path, name)
            } else {
                entry.file_name() == name
            }
        })
}

/// The states of `job`'s slot records in one home's run ledger (not its
/// `registered` record).
fn slot_states(home: &std::path::Path, job: &str) -> Vec<String> {
    let text = std::fs::read_to_string(home.join("schedule_runs.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|r| r["job"] == job && r["state"] != "registered")
        .map(|r| r["state"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The person's messages of a session's history (as JSON), in order.
fn questions(entries: &[jarvis_sdk::SessionEntry]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e.body.starts_turn())
        .map(|e| serde_json::to_string(&e.body).unwrap())
        .collect()
}

#[test]
fn three_nodes_forward_prompts_and_approvals_and_take_over_a_killed_owner() {
    let Some(pg) = TempPostgres::shared_or_skip("a three-node deployment") else {
        return;
    };
    let url = pg.url();
    let lease = LEASE_SECS.to_string();
    let env = |node: &'static str| -> Vec<(&'static str, String)> {
        vec![
            ("JARVIS_STORE__BACKEND", "postgres".to_owned()),
            ("JARVIS_STORE__POSTGRES_URL", url.clone()),
            ("JARVIS_NODE__ID", node.to_owned()),
            ("JARVIS_NODE__LEASE_SECS", lease.clone()),
            ("JARVIS_SCHEDULE__POLL_SECS", "0.2".to_owned()),
        ]
    };
    let start = |home: &mut Home, node: &'static str| {
        let vars = env(node);
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        home.serve(&vars)
    };
    let (mut home_a, mut home_b, mut home_c) = (Home::new(MEMO), Home::new(MEMO), Home::new(MEMO));
    let a = start(&mut home_a, "node-a");
    let b = start(&mut home_b, "node-b");
    let c = start(&mut home_c, "node-c");
    // The same job file on every node (configuration is identical across
    // a deployment), written once they run (each reads its `schedules/`
    // again at its next look, every 0.2 s), due a few seconds later.
    let due = jarvis_sdk::Timestamp::from_system_time(std::time::SystemTime::now()).as_millis() + 4_000;
    let due = jarvis_sdk::Timestamp::from_millis(due - due % 1_000);
    for home in [&home_a, &home_b, &home_c] {
        let dir = home.path().join("schedules");
        std::fs::create_dir_all(&dir).unwrap();
        jarvis_sdk::write_atomic(
            &dir.join("cluster-ping.yaml"),
            format!("prompt: 오늘 일정 알려줘\nat: \"{due}\"\n").as_bytes(),
        )
        .unwrap();
    }
    let rt = runtime();
    let session = "cluster-1";

    // The job's slot runs on one node; the other two record it as run
    // elsewhere.
    let deadline = Instant::now() + Duration::from_secs(30);
    let states = loop {
        let states: Vec<Vec<String>> = [&home_a, &home_b, &home_c]
            .iter()
            .map(|h| slot_states(h.path(), "cluster-ping"))
            .collect();
        let settled = states
            .iter()
            .all(|s| s.iter().any(|x| x == "done" || x == "skipped"));
        if settled || Instant::now() > deadline {
            break states;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let count = |state: &str| states.iter().flatten().filter(|s| *s == state).count();
    // Each node records `started` before it claims the slot.
    assert_eq!(
        (count("done"), count("skipped"), count("failed")),
        (1, 2, 0),
        "one node ran the slot, two skipped it: {states:?}"
    );

    rt.block_on(async {
        // B takes the session by running its first turn.
        let mut on_b = Ws::open(&b, session, Some("main")).await;
        on_b.prompt("안녕").await;
        let frames = on_b.until(is_end).await;
        assert!(texts_of(&frames, "agent_end")[0].contains("네."), "{frames:#?}");

        // A screen on A prompts it: the turn runs on B and streams to A; the
        // approval it asks for is answered on C.
        let mut on_a = Ws::open(&a, session, None).await;
        let on_c = Ws::open(&c, session, None).await;
        on_a.prompt("메모 남겨 줘").await;
        let asked = on_a.until(|f| kind(f) == "approval_request").await;
        assert!(
            asked.iter().any(|f| kind(f) == "agent_start"),
            "A sees the turn B runs from its start: {asked:#?}"
        );
        let request = asked.last().unwrap()["request_id"].as_str().unwrap().to_owned();
        on_c.decide(&request, ClientDecision::Allow).await;
        let rest = on_a.until(is_end).await;
        assert!(
            rest.iter()
                .any(|f| kind(f) == "approval_resolved" && f["request_id"] == request.as_str()),
            "the answer given on C resolved it: {rest:#?}"
        );
        assert!(texts_of(&rest, "agent_end")[0].contains("끝났어요."), "{rest:#?}");
        assert!(
            holds(home_b.path(), "memo.txt") && !holds(home_a.path(), "memo.txt"),
            "the tool ran on B, the owner, not on A"
        );

        // B dies in the middle of a turn that waits for an approval.
        on_a.prompt("메모 하나 더").await;
        on_a.until(|f| kind(f) == "approval_request").await;
        drop(on_b);
    });
    let killed = Instant::now();
    b.kill();
    let answered = rt.block_on(async {
        // The session answers on A once B's lease ran out.
        let mut on_a = Ws::open(&a, session, None).await;
        on_a.prompt("다음").await;
        let frames = on_a.until(is_end).await;
        assert!(texts_of(&frames, "agent_end")[0].contains("네."), "{frames:#?}");
        killed.elapsed()
    });
    let limit = Duration::from_secs_f64(LEASE_SECS) + Duration::from_secs(2);
    assert!(
        answered <= limit,
        "the session answered {answered:?} after its owner died (lease {LEASE_SECS} s + 2 s = {limit:?})"
    );

    // Every completed turn is in the history once, in order, and the turn B
    // was running when it died is closed as interrupted, once.
    let entries = rt.block_on(async {
        let store = PostgresSessionStore::connect(&url).await.unwrap();
        store.entries(&SessionId::new(session).unwrap()).await.unwrap()
    });
    let asked = questions(&entries);
    assert_eq!(asked.len(), 4, "{asked:#?}");
    for (question, said) in asked.iter().zip(["안녕", "메모 남겨 줘", "메모 하나 더", "다음"]) {
        assert!(question.contains(said), "{question} is {said}");
    }
    let ends: Vec<String> = entries
        .iter()
        .map(|e| serde_json::to_value(&e.body).unwrap())
        .filter(|b| b["kind"] == "turn_end")
        .map(|b| b["stop_reason"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(ends.len(), 4, "{ends:?}");
    assert_eq!(ends[2], "interrupted", "{ends:?}");
    assert_ne!(ends[3], "interrupted", "{ends:?}");
    a.stop();
    c.stop();
}
