//! Three `jarvis` processes on one Postgres, each with its own home, as a
//! deployment runs them: a screen on one node prompts a session another
//! node owns and sees its turn stream; an approval answered on a third
//! node resolves it. When the owner is SIGKILLed while a turn waits for an
//! approval, the answer given on another node resumes the turn there once
//! the owner's lease has run out; when an owner is SIGKILLed during a
//! model call, the session answers on another node with that turn closed
//! as interrupted. Every completed turn is in the history once. A job in
//! every node's `schedules/` runs once across the three.

use jarvis_sdk::agent::{PostgresSessionStore, SessionId, SessionStore};
use jarvis_sdk::testing::TempPostgres;
use jarvis_server::protocol::ClientDecision;
use serde_json::Value;
use std::time::{Duration, Instant};

use crate::durability::{Home, MEMO, Ws, is_end, kind, runtime};

/// [`MEMO`], and a model call that takes a minute for "천천히": long enough
/// to kill its node during it.
fn script() -> String {
    MEMO.replacen(
        "rules:\n",
        "rules:\n  - when: { purpose: step, last_role: user, last_user: \"천천히\" }\n    reply: { delay_ms: 60000, text: \"늦었어요.\" }\n",
        1,
    )
}

/// Waits until the lease of `session` records a running turn for `prompt`
/// (the owner records it beside the turn's first model call).
async fn lease_records(url: &str, session: &str, prompt: &str) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let row = client
            .query_opt(
                "SELECT turn->>'prompt' FROM jarvis_leases WHERE session_id = $1",
                &[&session],
            )
            .await
            .unwrap();
        if row.and_then(|r| r.get::<_, Option<String>>(0)).as_deref() == Some(prompt) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the turn for {prompt:?} was never recorded with the lease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

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
fn questions(entries: &[jarvis_sdk::agent::SessionEntry]) -> Vec<String> {
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
    let script = script();
    let (mut home_a, mut home_b, mut home_c) = (Home::new(&script), Home::new(&script), Home::new(&script));
    let a = start(&mut home_a, "node-a");
    let b = start(&mut home_b, "node-b");
    let c = start(&mut home_c, "node-c");
    // The same job file on every node (configuration is identical across
    // a deployment), written once they run (each reads its `schedules/`
    // again at its next look, every 0.2 s), due a few seconds later.
    let due =
        jarvis_sdk::common::Timestamp::from_system_time(std::time::SystemTime::now()).as_millis() + 4_000;
    let due = jarvis_sdk::common::Timestamp::from_millis(due - due % 1_000);
    for home in [&home_a, &home_b, &home_c] {
        let dir = home.path().join("schedules");
        std::fs::create_dir_all(&dir).unwrap();
        jarvis_sdk::common::write_atomic(
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

    let (mut on_a, mut on_c, request) = rt.block_on(async {
        // B takes the session by running its first turn.
        let mut on_b = Ws::open(&b, session, Some("main")).await;
        on_b.prompt("안녕").await;
        let frames = on_b.until(is_end).await;
        assert!(texts_of(&frames, "agent_end")[0].contains("네."), "{frames:#?}");

        // A screen on A prompts it: the turn runs on B and streams to A; the
        // approval it asks for is answered on C.
        let mut on_a = Ws::open(&a, session, None).await;
        let mut on_c = Ws::open(&c, session, None).await;
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
        on_c.until(is_end).await;

        // B dies while a turn waits for an approval.
        on_a.prompt("메모 하나 더").await;
        let asked = on_a.until(|f| kind(f) == "approval_request").await;
        let request = asked.last().unwrap()["request_id"].as_str().unwrap().to_owned();
        on_c.until(|f| kind(f) == "approval_request").await;
        drop(on_b);
        (on_a, on_c, request)
    });
    let killed = Instant::now();
    b.kill();
    let answered = rt.block_on(async {
        // The answer given on A waits out B's lease: A takes the session
        // and the turn with it, asks again under the same id (answered
        // already) and finishes it.
        on_a.decide(&request, ClientDecision::Allow).await;
        let rest = on_a.until(is_end).await;
        let answered = killed.elapsed();
        assert!(
            rest.iter()
                .any(|f| kind(f) == "approval_resolved" && f["request_id"] == request.as_str()),
            "the answer given on A resolved the request B asked: {rest:#?}"
        );
        assert!(texts_of(&rest, "agent_end")[0].contains("끝났어요."), "{rest:#?}");
        assert!(
            holds(home_a.path(), "memo.txt"),
            "the tool ran on A, the new owner"
        );
        answered
    });
    let limit = Duration::from_secs_f64(LEASE_SECS) + Duration::from_secs(2);
    assert!(
        answered <= limit,
        "the turn resumed {answered:?} after its owner died (lease {LEASE_SECS} s + 2 s = {limit:?})"
    );

    // A dies during a model call of a turn prompted on C.
    rt.block_on(async {
        on_c.prompt("천천히 생각해 줘").await;
        on_c.until(|f| kind(f) == "agent_start").await;
        lease_records(&url, session, "천천히 생각해 줘").await;
    });
    let killed = Instant::now();
    a.kill();
    let answered = rt.block_on(async {
        // The session answers on C once A's lease ran out.
        let mut on_c = Ws::open(&c, session, None).await;
        on_c.prompt("다음").await;
        let frames = on_c.until(is_end).await;
        assert!(texts_of(&frames, "agent_end")[0].contains("네."), "{frames:#?}");
        killed.elapsed()
    });
    assert!(
        answered <= limit,
        "the session answered {answered:?} after its owner died (lease {LEASE_SECS} s + 2 s = {limit:?})"
    );

    // Every completed turn is in the history once, in order; the turn that
    // waited for an approval when B died completed on A, and the one A was
    // running when it died is closed as interrupted, once.
    let entries = rt.block_on(async {
        let store = PostgresSessionStore::connect(&url).await.unwrap();
        store.entries(&SessionId::new(session).unwrap()).await.unwrap()
    });
    let asked = questions(&entries);
    assert_eq!(asked.len(), 5, "{asked:#?}");
    for (question, said) in
        asked
            .iter()
            .zip(["안녕", "메모 남겨 줘", "메모 하나 더", "천천히 생각해 줘", "다음"])
    {
        assert!(question.contains(said), "{question} is {said}");
    }
    let ends: Vec<String> = entries
        .iter()
        .map(|e| serde_json::to_value(&e.body).unwrap())
        .filter(|b| b["kind"] == "turn_end")
        .map(|b| b["stop_reason"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(ends.len(), 5, "{ends:?}");
    assert!(
        ends.iter()
            .enumerate()
            .all(|(i, end)| (end == "interrupted") == (i == 3)),
        "only the turn A was running is interrupted: {ends:?}"
    );
    c.stop();
}
