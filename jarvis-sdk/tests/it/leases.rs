//! Session leases on a real Postgres: one node owns a session at a time,
//! a write carrying a superseded token is fenced off, a node reads the
//! window of a session it holds without asking the database, and a node
//! that left or crashed with its home gives its sessions up at once.

use jarvis_sdk::agent::{Claim, NewSession, NodeOptions, PostgresSessionStore, SessionError, SessionStore};
use std::time::Duration;
use tokio_postgres::NoTls;

use crate::pg::fresh_schema;
use crate::sessions_contract::{id, turn};

/// A lease long enough that no heartbeat runs during a test: the tests
/// make a node lapse by moving its row's expiry, as a pause would.
const LONG: Duration = Duration::from_secs(600);

async fn node(url: &str, name: &str) -> PostgresSessionStore {
    PostgresSessionStore::connect(url)
        .await
        .unwrap()
        .with_node(NodeOptions::new(name).with_lease(LONG))
        .await
        .unwrap()
}

/// A plain connection to the test's schema.
async fn sql(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// Makes `node`'s lease run out now, as if it had stopped renewing it.
async fn lapse(url: &str, node: &str) {
    let changed = sql(url)
        .await
        .execute(
            "UPDATE jarvis_nodes SET expires_at = clock_timestamp() - interval '1 second' WHERE id = $1",
            &[&node],
        )
        .await
        .unwrap();
    assert_eq!(changed, 1, "node {node} is registered");
}

/// A job runner that lists the runs it was asked for.
#[derive(Debug, Default)]
struct Runs(std::sync::Mutex<Vec<String>>);

#[async_trait::async_trait]
impl jarvis_sdk::initiative::JobRunner for Runs {
    async fn run(
        &self,
        job: &jarvis_sdk::initiative::Job,
        slot: jarvis_sdk::common::Timestamp,
    ) -> Result<jarvis_sdk::initiative::JobOutput, String> {
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {} {slot}", job.id, job.prompt));
        Ok(jarvis_sdk::initiative::JobOutput::default())
    }
}

/// How many runs of three nodes' ticks were done here, and how many ran
/// elsewhere.
fn done_and_elsewhere(ticks: [&jarvis_sdk::initiative::ScheduleTick; 3]) -> (usize, usize) {
    let outcomes: Vec<&jarvis_sdk::initiative::RunOutcome> = ticks
        .iter()
        .flat_map(|t| t.runs.iter().map(|r| &r.outcome))
        .collect();
    let done = outcomes
        .iter()
        .filter(|o| matches!(o, jarvis_sdk::initiative::RunOutcome::Done(_)))
        .count();
    let elsewhere = outcomes
        .iter()
        .filter(|o| matches!(o, jarvis_sdk::initiative::RunOutcome::RanElsewhere))
        .count();
    (done, elsewhere)
}

fn seqs(entries: &[jarvis_sdk::agent::SessionEntry]) -> Vec<u64> {
    entries.iter().map(|e| e.seq).collect()
}

/// The fencing guarantee: once another node took a session over, a write
/// with the old token fails with `Fenced` and writes nothing, though the
/// old node still believes its lease runs.
#[tokio::test]
async fn a_superseded_token_is_fenced_on_append() {
    let Some((url, _schema)) = fresh_schema("leases: fencing").await else {
        return;
    };
    let a = node(&url, "node-a").await;
    let b = node(&url, "node-b").await;
    a.create(NewSession::user(id("s"), "main")).await.unwrap();
    assert_eq!(
        a.append(&id("s"), turn(1)).await.unwrap(),
        6,
        "a claims s by writing it"
    );
    assert_eq!(a.claim(&id("s")).await.unwrap(), Claim::Held { token: 1 });

    // While a lives, b may not write.
    match b.claim(&id("s")).await.unwrap() {
        Claim::Elsewhere { node, expires_in } => {
            assert_eq!(node, "node-a");
            assert!(expires_in > Duration::from_secs(500), "{expires_in:?}");
        }
        other => panic!("b claimed a live node's session: {other:?}"),
    }
    let err = b.append(&id("s"), turn(2)).await.unwrap_err();
    assert!(
        matches!(&err, SessionError::OwnedElsewhere { node, .. } if node == "node-a"),
        "{err:?}"
    );
    assert_eq!(b.owner(&id("s")).await.unwrap().unwrap().0, "node-a");

    // a is paused past its lease: b takes over with a new token.
    lapse(&url, "node-a").await;
    assert_eq!(b.claim(&id("s")).await.unwrap(), Claim::Held { token: 2 });
    assert_eq!(b.append(&id("s"), turn(2)).await.unwrap(), 12);

    // a wakes up and writes with token 1: fenced, nothing written.
    let err = a.append(&id("s"), turn(3)).await.unwrap_err();
    assert!(
        matches!(&err, SessionError::Fenced { owner, .. } if owner == "node-b"),
        "{err:?}"
    );
    assert!(err.to_string().contains("fenced"), "{err}");
    assert_eq!(
        seqs(&b.entries(&id("s")).await.unwrap()),
        (1..=12).collect::<Vec<_>>()
    );
    // a forgot its lease: its reads go to the database and see b's turn,
    // and it cannot claim the session back while b lives.
    let window = a.recent(&id("s"), 1).await.unwrap();
    assert_eq!(window.first().unwrap().seq, 8, "turn 2's question: {window:?}");
    assert!(matches!(
        a.claim(&id("s")).await.unwrap(),
        Claim::Elsewhere { .. }
    ));
    assert!(matches!(
        a.append(&id("s"), turn(3)).await.unwrap_err(),
        SessionError::OwnedElsewhere { .. }
    ));
    // A session nobody has is still not found, not fenced.
    assert!(
        b.append(&id("missing"), turn(1))
            .await
            .unwrap_err()
            .is_not_found()
    );
}

/// While its lease certainly runs, a node answers the recent window of a
/// session it holds from its cache: a row slipped into the table behind
/// every lease's back is not read. Once the node lost the session, its
/// reads go to the database again.
#[tokio::test]
async fn a_holding_node_reads_its_window_without_the_database() {
    let Some((url, _schema)) = fresh_schema("leases: cached window").await else {
        return;
    };
    let a = node(&url, "node-a").await;
    a.create(NewSession::user(id("s"), "main")).await.unwrap();
    a.append(&id("s"), turn(1)).await.unwrap();
    assert_eq!(
        seqs(&a.recent(&id("s"), 1).await.unwrap()),
        (2..=6).collect::<Vec<_>>()
    );
    a.append(&id("s"), turn(2)).await.unwrap();
    // A copy of turn 2's question, as seq 13.
    sql(&url)
        .await
        .execute(
            "INSERT INTO jarvis_entries (session_id, seq, starts_turn, body) \
             SELECT session_id, 13, true, body FROM jarvis_entries WHERE session_id = 's' AND seq = 8",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        seqs(&a.recent(&id("s"), 1).await.unwrap()),
        (8..=12).collect::<Vec<_>>(),
        "answered from the cache"
    );
    let plain = PostgresSessionStore::connect(&url).await.unwrap();
    assert_eq!(
        seqs(&plain.recent(&id("s"), 1).await.unwrap()),
        vec![13],
        "the table has it"
    );

    // Another node takes over: a's next write is fenced, and from then on
    // a reads the database.
    lapse(&url, "node-a").await;
    let b = node(&url, "node-b").await;
    assert_eq!(b.claim(&id("s")).await.unwrap(), Claim::Held { token: 2 });
    assert!(matches!(
        a.append(&id("s"), turn(3)).await.unwrap_err(),
        SessionError::Fenced { .. }
    ));
    assert_eq!(seqs(&a.recent(&id("s"), 1).await.unwrap()), vec![13]);
}

/// A node that leaves frees its sessions at once, and a node starting with
/// the home of a crashed process (same host, same home) takes over that
/// process's sessions without waiting for its lease.
#[tokio::test]
async fn a_node_that_left_or_crashed_with_its_home_frees_its_sessions() {
    let Some((url, _schema)) = fresh_schema("leases: leave and restart").await else {
        return;
    };
    let a = node(&url, "node-a").await;
    let b = node(&url, "node-b").await;
    a.create(NewSession::user(id("s"), "main")).await.unwrap();
    a.append(&id("s"), turn(1)).await.unwrap();
    a.leave().await.unwrap();
    assert_eq!(b.claim(&id("s")).await.unwrap(), Claim::Held { token: 2 });
    assert_eq!(b.append(&id("s"), turn(2)).await.unwrap(), 12);

    let home = "/srv/jarvis-home";
    let first = PostgresSessionStore::connect(&url)
        .await
        .unwrap()
        .with_node(NodeOptions::new("host-100").with_lease(LONG).with_home(home))
        .await
        .unwrap();
    first.create(NewSession::user(id("t"), "main")).await.unwrap();
    first.append(&id("t"), turn(1)).await.unwrap();
    assert!(matches!(
        b.claim(&id("t")).await.unwrap(),
        Claim::Elsewhere { .. }
    ));
    // The process died (its home lock is free again); the next one starts.
    let second = PostgresSessionStore::connect(&url)
        .await
        .unwrap()
        .with_node(NodeOptions::new("host-200").with_lease(LONG).with_home(home))
        .await
        .unwrap();
    assert_eq!(second.append(&id("t"), turn(2)).await.unwrap(), 12);
    assert_eq!(second.claim(&id("t")).await.unwrap(), Claim::Held { token: 2 });
    assert!(matches!(
        first.append(&id("t"), turn(3)).await.unwrap_err(),
        SessionError::Fenced { .. }
    ));
}

/// Two nodes claiming a free session at once: exactly one gets it.
#[tokio::test]
async fn of_two_nodes_claiming_at_once_one_wins() {
    let Some((url, _schema)) = fresh_schema("leases: racing claims").await else {
        return;
    };
    let a = node(&url, "node-a").await;
    let b = node(&url, "node-b").await;
    a.create(NewSession::user(id("s"), "main")).await.unwrap();
    for round in 0..20 {
        let session = id(&format!("r{round}"));
        let (x, y) = tokio::join!(a.claim(&session), b.claim(&session));
        let held = [x.unwrap(), y.unwrap()]
            .iter()
            .filter(|c| matches!(c, Claim::Held { .. }))
            .count();
        assert_eq!(held, 1, "round {round}");
    }
}

/// Three nodes, each with its own home and ledger, reach a job's slot at
/// once: it runs on exactly one of them, and the others record it as
/// skipped, with no run.
#[tokio::test]
async fn a_schedule_slot_runs_once_across_three_nodes() {
    use jarvis_sdk::app::PostgresSlotClaim;
    use jarvis_sdk::common::{ManualClock, Timestamp};
    use jarvis_sdk::initiative::{Scheduler, SchedulerConfig};
    use std::sync::Arc;

    let Some((url, _schema)) = fresh_schema("leases: schedule slots").await else {
        return;
    };
    let start = Timestamp::parse_rfc3339("2026-11-30T08:00:00+09:00").unwrap();
    let clock = Arc::new(ManualClock::new(start.to_system_time()));
    let runs = Arc::new(Runs::default());
    let mut homes = Vec::new();
    let mut schedulers = Vec::new();
    for name in ["node-a", "node-b", "node-c"] {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("schedules")).unwrap();
        std::fs::write(
            home.path().join("schedules/water.yaml"),
            "prompt: 물 마시기\nevery: 30m\n",
        )
        .unwrap();
        let claim = PostgresSlotClaim(node(&url, name).await);
        let scheduler = Scheduler::new(
            home.path(),
            clock.clone(),
            runs.clone(),
            SchedulerConfig::default(),
        )
        .unwrap()
        .with_slot_claim(Arc::new(claim));
        assert!(scheduler.tick().await.runs.is_empty(), "registered, nothing due");
        homes.push(home);
        schedulers.push(scheduler);
    }
    for slot in 1..=3 {
        clock.advance(Duration::from_secs(30 * 60));
        let (a, b, c) = tokio::join!(schedulers[0].tick(), schedulers[1].tick(), schedulers[2].tick());
        assert_eq!(
            done_and_elsewhere([&a, &b, &c]),
            (1, 2),
            "every node reached slot {slot}, one ran it: {a:?} {b:?} {c:?}"
        );
    }
    let ran = runs.0.lock().unwrap().clone();
    assert_eq!(ran.len(), 3, "one run per slot: {ran:?}");
    assert_eq!(
        ran.iter().collect::<std::collections::BTreeSet<_>>().len(),
        3,
        "three different slots: {ran:?}"
    );
}

/// A node that dies during a turn leaves the turn recorded in its lease:
/// the node taking the session over closes it as interrupted, once; a turn
/// whose block was written is not closed again.
#[tokio::test]
async fn a_turn_left_running_is_closed_as_interrupted_by_the_next_owner() {
    let Some((url, _schema)) = fresh_schema("leases: interrupted turns").await else {
        return;
    };
    let a = node(&url, "node-a").await;
    a.create(NewSession::user(id("s"), "main")).await.unwrap();
    a.append(&id("s"), turn(1)).await.unwrap();
    a.record_turn(&id("s"), "t-9", "메모 하나 더").await.unwrap();
    // a dies; b takes over and closes the turn.
    lapse(&url, "node-a").await;
    let b = node(&url, "node-b").await;
    assert_eq!(b.claim(&id("s")).await.unwrap(), Claim::Held { token: 2 });
    let entries = b.entries(&id("s")).await.unwrap();
    let tail: Vec<serde_json::Value> = entries[6..]
        .iter()
        .map(|e| serde_json::to_value(&e.body).unwrap())
        .collect();
    assert_eq!(tail.len(), 3, "{tail:#?}");
    assert_eq!(tail[0]["kind"], "turn_start");
    assert_eq!(tail[0]["turn_id"], "t-9");
    assert!(tail[1].to_string().contains("메모 하나 더"), "{tail:#?}");
    assert_eq!(tail[2]["kind"], "turn_end");
    assert_eq!(tail[2]["stop_reason"], "interrupted");
    // Claimed again by a third node: nothing more is written.
    lapse(&url, "node-b").await;
    let c = node(&url, "node-c").await;
    assert_eq!(c.claim(&id("s")).await.unwrap(), Claim::Held { token: 3 });
    assert_eq!(c.entries(&id("s")).await.unwrap().len(), 9);

    // A turn recorded as running whose block was written (the record came
    // late) is not closed twice.
    c.record_turn(&id("s"), "t-10", "late").await.unwrap();
    let mut done = turn(2);
    done[0] = jarvis_sdk::agent::EntryBody::turn_start("t-10");
    c.append(&id("s"), done).await.unwrap();
    c.record_turn(&id("s"), "t-10", "late").await.unwrap();
    lapse(&url, "node-c").await;
    let d = node(&url, "node-d").await;
    d.claim(&id("s")).await.unwrap();
    assert_eq!(
        d.entries(&id("s")).await.unwrap().len(),
        15,
        "no interrupted block for a written turn"
    );
}

/// `/schedule` on one node of a deployment adds the job to `jarvis_jobs`:
/// every node runs it from its next tick (each slot once), no home gets a
/// job file, and removing it stops it everywhere.
#[tokio::test]
async fn a_job_scheduled_on_one_node_is_due_on_every_node() {
    use jarvis_sdk::app::{PostgresJobs, PostgresSlotClaim};
    use jarvis_sdk::common::{ManualClock, Timestamp};
    use jarvis_sdk::initiative::{JobOrigin, ScheduleCommand, Scheduler, SchedulerConfig};
    use std::sync::Arc;

    let Some((url, _schema)) = fresh_schema("leases: shared jobs").await else {
        return;
    };
    let start = Timestamp::parse_rfc3339("2026-11-30T08:00:00+09:00").unwrap();
    let clock = Arc::new(ManualClock::new(start.to_system_time()));
    let runs = Arc::new(Runs::default());
    let mut homes = Vec::new();
    let mut schedulers = Vec::new();
    for name in ["node-a", "node-b", "node-c"] {
        let home = tempfile::tempdir().unwrap();
        let store = node(&url, name).await;
        let scheduler = Scheduler::new(
            home.path(),
            clock.clone(),
            runs.clone(),
            SchedulerConfig::default(),
        )
        .unwrap()
        .with_slot_claim(Arc::new(PostgresSlotClaim(store.clone())))
        .with_shared_jobs(Arc::new(PostgresJobs(store)));
        assert!(scheduler.tick().await.runs.is_empty());
        homes.push(home);
        schedulers.push(scheduler);
    }

    let answer = schedulers[1]
        .schedule("main", "every 30m 물 마시기")
        .await
        .unwrap();
    assert!(answer.contains("물 마시기"), "{answer}");
    let job = schedulers[1].jobs().into_iter().next().unwrap().job;
    assert_eq!(job.origin, JobOrigin::Deployment);
    for home in &homes {
        assert!(!home.path().join("schedules").exists(), "no job file in any home");
    }
    // The others read it on their next tick, at the same moment.
    for scheduler in [&schedulers[0], &schedulers[2]] {
        let tick = scheduler.tick().await;
        assert_eq!(tick.registered, vec![job.id.clone()], "{tick:?}");
    }
    for slot in 1..=2 {
        clock.advance(Duration::from_secs(30 * 60));
        let (a, b, c) = tokio::join!(schedulers[0].tick(), schedulers[1].tick(), schedulers[2].tick());
        assert_eq!(
            done_and_elsewhere([&a, &b, &c]),
            (1, 2),
            "slot {slot}: {a:?} {b:?} {c:?}"
        );
    }
    assert_eq!(runs.0.lock().unwrap().len(), 2);

    // A second `/schedule` of the same minute gets an id of its own.
    let second = schedulers[0].schedule("main", "every 1h 스트레칭").await.unwrap();
    assert!(second.contains("-2"), "{second}");

    schedulers[2].remove_shared_job(&job.id).await.unwrap();
    assert!(
        schedulers[2].remove_shared_job(&job.id).await.is_err(),
        "gone already"
    );
    clock.advance(Duration::from_secs(30 * 60));
    for scheduler in &schedulers {
        let tick = scheduler.tick().await;
        assert!(tick.runs.iter().all(|r| r.job != job.id), "{tick:?}");
    }
    assert_eq!(runs.0.lock().unwrap().len(), 2, "removed on every node");
}

/// "Always allow" on one node writes to `jarvis_approval_rules`, not the
/// agent's file: the next call on another node is allowed by it; an agent
/// file's deny still comes first, and other agents are not covered.
#[tokio::test]
async fn always_allow_on_one_node_holds_on_every_node() {
    use jarvis_sdk::agent::ToolCallInfo;
    use jarvis_sdk::app::PostgresApprovalRules;
    use jarvis_sdk::turn::{LayeredApprovalRules, RuleDecision, RuleSource};
    use serde_json::json;
    use std::sync::Arc;

    let Some((url, _schema)) = fresh_schema("leases: shared rules").await else {
        return;
    };
    let (home_a, home_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rules_a = LayeredApprovalRules::new(home_a.path())
        .with_shared(Arc::new(PostgresApprovalRules(node(&url, "node-a").await)));
    let rules_b = LayeredApprovalRules::new(home_b.path())
        .with_shared(Arc::new(PostgresApprovalRules(node(&url, "node-b").await)));
    let args = json!({"program": "git", "args": ["status"]});
    let call = |agent: &'static str| ToolCallInfo::new("s1", agent, "c1", "run_command", &args, true);
    let call_main = call("main");
    assert_eq!(rules_b.decide_gate(&call_main).await, None);

    assert!(rules_a.remember("main", "run_command", &args).await.unwrap());
    assert!(
        !rules_a.remember("main", "run_command", &args).await.unwrap(),
        "once"
    );
    assert!(!home_a.path().join("approvals").exists(), "no agent file written");
    assert_eq!(
        rules_b.decide_gate(&call_main).await,
        Some((RuleDecision::Allow, RuleSource::Deployment))
    );
    assert_eq!(
        rules_b.decide_gate(&call("karen")).await,
        None,
        "main's rule only"
    );

    // The agent's own file is read first.
    std::fs::create_dir_all(home_b.path().join("approvals")).unwrap();
    std::fs::write(
        home_b.path().join("approvals/main.yaml"),
        "- { tool: run_command, decision: deny }\n",
    )
    .unwrap();
    assert!(matches!(
        rules_b.decide_gate(&call_main).await,
        Some((RuleDecision::Deny, RuleSource::Agent(_)))
    ));
}

/// A node's link whose connection is cut (the database restarted, a proxy
/// dropped it) connects again and hears the other nodes, large messages
/// (sent by reference) too.
#[tokio::test]
async fn a_broken_link_connects_again() {
    use jarvis_sdk::app::{ClusterLink, NodeMessage, PgCluster};

    let Some((url, _schema)) = fresh_schema("leases: link reconnects").await else {
        return;
    };
    let a = PgCluster::start(&url, node(&url, "link-a").await).await.unwrap();
    let b = PgCluster::start(&url, node(&url, "link-b").await).await.unwrap();
    let mut heard = a.incoming().unwrap();
    let watch = |session: &str| NodeMessage::Watch {
        session_id: session.to_owned(),
        node: "link-b".to_owned(),
    };
    b.send("link-a", watch("before"));
    assert!(
        matches!(heard.recv().await, Some(NodeMessage::Watch { session_id, .. }) if session_id == "before")
    );

    let cut = sql(&url)
        .await
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'jarvis-link-link-a'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(cut, 1, "A's link had one connection");

    // What is sent while A is away is lost; once it is back it hears again.
    let big = "세".repeat(4_000);
    let back = tokio::time::timeout(Duration::from_secs(20), async {
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tokio::select! {
                _ = tick.tick() => b.send("link-a", watch(&big)),
                message = heard.recv() => match message {
                    Some(NodeMessage::Watch { session_id, .. }) if session_id == big => return true,
                    Some(_) => {}
                    None => return false,
                },
            }
        }
    })
    .await;
    assert_eq!(back, Ok(true), "A hears B again after its link was cut");
}

/// A person's turn that stopped for an approval is kept with the session's
/// lease as its journal recorded it: the node taking the session over gets
/// it to resume (same request id, nothing written to history), and so
/// does the node after that; once it was answered, a node that dies before
/// the turn ends leaves it to be closed as interrupted with what it did.
#[tokio::test]
async fn a_turn_waiting_for_approval_moves_with_its_session() {
    use jarvis_sdk::agent::{
        ApprovalDecision, ApprovalRequest, INTERRUPTED_RESULT, LoopState, TurnBegin, TurnJournal,
    };
    use jarvis_sdk::common::Timestamp;
    use jarvis_sdk::model::{AssistantMessage, Message, ToolCall};
    use serde_json::json;
    use std::sync::Arc;

    let Some((url, _schema)) = fresh_schema("leases: a turn waiting for approval").await else {
        return;
    };
    let a = node(&url, "node-a").await;
    a.create(NewSession::user(id("s"), "main")).await.unwrap();
    a.append(&id("s"), turn(1)).await.unwrap();
    let before = a.entries(&id("s")).await.unwrap().len();

    // Node a's turn asks for approval of a tool call, then a dies.
    let journal = TurnJournal::in_memory().with_mirror(Arc::new(a.clone()));
    journal.begin(TurnBegin {
        turn_id: "t-7".into(),
        session_id: "s".into(),
        agent_id: "main".into(),
        at: Timestamp::from_millis(1_000),
        prompt: "a.txt에 써 줘".into(),
        parent: None,
        resumable: true,
    });
    a.record_turn(&id("s"), "t-7", "a.txt에 써 줘").await.unwrap();
    let calling = Message::Assistant(AssistantMessage {
        tool_calls: vec![ToolCall {
            id: "call-1".into(),
            name: "write_file".into(),
            arguments: json!({"path": "a.txt"}),
        }],
        ..AssistantMessage::default()
    });
    journal.step("t-7", &calling, &LoopState::default());
    let request = ApprovalRequest {
        request_id: "approval_7".into(),
        session_id: "s".into(),
        agent_id: "main".into(),
        tool_name: "write_file".into(),
        args: json!({"path": "a.txt"}),
    };
    journal
        .ask("t-7", "call-1", &request, Timestamp::from_millis(2_000))
        .await
        .unwrap();
    // The turn's start, recorded late, does not overwrite what it asked.
    a.record_turn(&id("s"), "t-7", "a.txt에 써 줘").await.unwrap();
    lapse(&url, "node-a").await;

    // b takes the session over with the turn, waiting as it was.
    let b = node(&url, "node-b").await;
    assert!(matches!(b.claim(&id("s")).await.unwrap(), Claim::Held { .. }));
    let taken = b
        .adopted_turn(&id("s"))
        .expect("the turn waiting for approval is handed over");
    assert_eq!(taken.turn_id(), "t-7");
    assert!(taken.waits_for_a_person());
    assert_eq!(taken.approvals[0].request.request_id, "approval_7");
    assert_eq!(taken.steps.len(), 1);
    assert!(b.adopted_turn(&id("s")).is_none(), "handed over once");
    assert_eq!(
        b.entries(&id("s")).await.unwrap().len(),
        before,
        "nothing is closed while the turn can resume"
    );

    // b dies before anyone answers: c gets the same turn.
    lapse(&url, "node-b").await;
    let c = node(&url, "node-c").await;
    assert!(matches!(c.claim(&id("s")).await.unwrap(), Claim::Held { .. }));
    let again = c.adopted_turn(&id("s")).expect("handed on again");
    assert_eq!(again, taken);

    // c resumes it and the person allows the call; c dies before the turn
    // ends, so d closes it as interrupted with the call it made.
    let resumed = TurnJournal::in_memory().with_mirror(Arc::new(c.clone()));
    assert!(resumed.adopt(&again).await.unwrap());
    resumed
        .decide("t-7", "approval_7", ApprovalDecision::Allow)
        .await
        .unwrap();
    lapse(&url, "node-c").await;
    let d = node(&url, "node-d").await;
    assert!(matches!(d.claim(&id("s")).await.unwrap(), Claim::Held { .. }));
    assert!(
        d.adopted_turn(&id("s")).is_none(),
        "an answered turn is not resumed elsewhere"
    );
    let entries = d.entries(&id("s")).await.unwrap();
    let tail: Vec<serde_json::Value> = entries[before..]
        .iter()
        .map(|e| serde_json::to_value(&e.body).unwrap())
        .collect();
    let text = serde_json::to_string(&tail).unwrap();
    assert_eq!(tail.first().unwrap()["turn_id"], "t-7", "{tail:#?}");
    assert_eq!(tail.last().unwrap()["stop_reason"], "interrupted", "{tail:#?}");
    assert!(
        text.contains("call-1") && text.contains(INTERRUPTED_RESULT),
        "{tail:#?}"
    );
    // Once.
    lapse(&url, "node-d").await;
    let e = node(&url, "node-e").await;
    e.claim(&id("s")).await.unwrap();
    assert_eq!(e.entries(&id("s")).await.unwrap().len(), entries.len());
}
