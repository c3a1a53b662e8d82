//! Approvals: the per-session broker with several screens, timeouts and
//! cancellation; the layered rule files; the allow-list and boundaries.

use jarvis_sdk::agent::{
    ApprovalDecision, ApprovalRequest, Approver, GateDecision, ToolCallInfo, ToolGate, ToolPolicy,
    ToolResult, UIAdapter,
};
use jarvis_sdk::common::SequentialIds;
use jarvis_sdk::model::Message;
use jarvis_sdk::testing::{FnTool, RecordingAdapter};
use jarvis_sdk::turn::{AgentToolPolicy, ApprovalBroker, Boundaries, LayeredApprovalRules, RuleDecision};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A temporary `JARVIS_HOME`, removed on drop.
struct Home(PathBuf);

impl Home {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("jarvis-approvals-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Home(dir)
    }
    fn rules(&self) -> Arc<LayeredApprovalRules> {
        Arc::new(LayeredApprovalRules::new(&self.0))
    }
    fn write(&self, rel: &str, text: &str) {
        let path = self.0.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.0.join(rel)).unwrap_or_default()
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn call<'a>(agent: &'a str, tool: &'a str, args: &'a Value, asks: bool) -> ToolCallInfo<'a> {
    ToolCallInfo {
        session_id: "s1",
        turn_id: "",
        agent_id: agent,
        tool_call_id: "c1",
        tool_name: tool,
        arguments: args,
        programs: &[],
        requires_approval: asks,
    }
}

fn broker(home: &Home) -> ApprovalBroker {
    ApprovalBroker::new("s1", home.rules(), Arc::new(SequentialIds::default()))
}

/// A screen that hands every request to the test through a channel.
struct Screen {
    seen: Arc<RecordingAdapter>,
    requests: tokio::sync::mpsc::UnboundedSender<ApprovalRequest>,
    resolved: Mutex<Vec<(String, ApprovalDecision)>>,
}

impl UIAdapter for Screen {
    fn on_approval_request(&self, request: &ApprovalRequest) {
        self.seen.on_approval_request(request);
        let _ = self.requests.send(request.clone());
    }
    fn on_approval_resolved(&self, request_id: &str, decision: ApprovalDecision) {
        self.resolved
            .lock()
            .unwrap()
            .push((request_id.to_owned(), decision));
    }
}

fn screen() -> (Arc<Screen>, tokio::sync::mpsc::UnboundedReceiver<ApprovalRequest>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    (
        Arc::new(Screen {
            seen: Arc::new(RecordingAdapter::new()),
            requests: tx,
            resolved: Mutex::default(),
        }),
        rx,
    )
}

#[tokio::test]
async fn every_screen_is_asked_the_first_answer_wins_and_all_see_it() {
    let home = Home::new("fanout");
    let broker = broker(&home);
    let (a, mut a_rx) = screen();
    let (b, mut b_rx) = screen();
    let _ta = broker.attach(a.clone());
    let _tb = broker.attach(b.clone());
    let args = json!({"program": "git", "args": ["status"]});
    let info = call("main", "run_command", &args, true);
    let waiting = broker.approve(&info);
    let answer = async {
        let request = a_rx.recv().await.unwrap();
        let same = b_rx.recv().await.unwrap();
        assert_eq!(request, same, "both screens got the same request");
        assert_eq!(broker.pending().len(), 1);
        assert!(
            broker.decide(&request.request_id, ApprovalDecision::Allow),
            "the first answer wins"
        );
        assert!(
            !broker.decide(&request.request_id, ApprovalDecision::Deny),
            "a later answer loses"
        );
        request
    };
    let (decision, request) = tokio::join!(waiting, answer);
    assert_eq!(decision, ApprovalDecision::Allow);
    assert_eq!(request.session_id, "s1");
    assert_eq!(request.tool_name, "run_command");
    assert_eq!(request.args, args);
    for s in [&a, &b] {
        assert_eq!(
            *s.resolved.lock().unwrap(),
            [(request.request_id.clone(), ApprovalDecision::Allow)]
        );
    }
    assert!(broker.pending().is_empty());
    assert_eq!(a.seen.approval_requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn no_answer_within_the_timeout_denies() {
    let home = Home::new("timeout");
    let broker = broker(&home).with_timeout(Duration::from_secs(30));
    let (a, _rx) = screen();
    let _t = broker.attach(a.clone());
    let args = json!({"path": "x"});
    let started = tokio::time::Instant::now();
    let decision = broker.approve(&call("main", "write_file", &args, true)).await;
    assert_eq!(decision, ApprovalDecision::Timeout);
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    assert_eq!(a.resolved.lock().unwrap()[0].1, ApprovalDecision::Timeout);
    let verdict = ToolGate::new()
        .with_approver(Arc::new(broker.clone()))
        .check(&call("main", "write_file", &args, true))
        .await;
    assert!(
        verdict
            .refusal_message("write_file")
            .unwrap()
            .contains("nobody approved it in time")
    );
}

#[tokio::test]
async fn a_turn_that_ends_first_cancels_the_request() {
    let home = Home::new("cancel");
    let broker = broker(&home);
    let (a, mut rx) = screen();
    let _t = broker.attach(a.clone());
    let args = json!({});
    let info = call("main", "run_python", &args, true);
    let waiting = broker.approve(&info);
    tokio::select! {
        _ = waiting => panic!("nobody answered"),
        request = rx.recv() => {
            let request = request.unwrap();
            // The select drops the waiting approval: the turn was aborted.
            drop(request);
        }
    }
    assert!(broker.pending().is_empty());
    assert_eq!(a.resolved.lock().unwrap()[0].1, ApprovalDecision::Cancelled);
}

#[tokio::test]
async fn a_screen_attached_later_sees_waiting_requests() {
    let home = Home::new("late");
    let broker = broker(&home);
    let args = json!({"program": "ls"});
    let info = call("main", "run_command", &args, true);
    let waiting = broker.approve(&info);
    let late = async {
        tokio::task::yield_now().await;
        let (late, mut rx) = screen();
        let _t = broker.attach(late.clone());
        let request = rx.recv().await.unwrap();
        broker.decide(&request.request_id, ApprovalDecision::Deny);
    };
    let (decision, ()) = tokio::join!(waiting, late);
    assert_eq!(decision, ApprovalDecision::Deny);
}

#[tokio::test]
async fn always_allow_persists_to_the_agents_file_and_survives_a_restart() {
    let home = Home::new("always");
    let broker = broker(&home);
    let (a, mut rx) = screen();
    let _t = broker.attach(a);
    let args = json!({"program": "git", "args": ["log", "-1"]});
    let info = call("karen", "run_command", &args, true);
    let answer = async {
        let r = rx.recv().await.unwrap();
        broker.decide(&r.request_id, ApprovalDecision::Always);
    };
    let (decision, ()) = tokio::join!(broker.approve(&info), answer);
    assert_eq!(decision, ApprovalDecision::Always);
    let file = home.read("approvals/karen.yaml");
    assert!(
        file.contains("tool: run_command") && file.contains("program: git"),
        "{file}"
    );
    assert!(
        home.read("approvals.yaml").is_empty(),
        "the shared file is never written"
    );
    assert!(
        !home.0.join("approvals/main.yaml").exists(),
        "only the session agent's file"
    );

    // A fresh rule set (a restart) allows the same call without asking …
    let restarted = home.rules();
    assert_eq!(
        restarted.decide("karen", "run_command", &args).map(|d| d.0),
        Some(RuleDecision::Allow)
    );
    // … but not other arguments, and not for another agent.
    assert_eq!(
        restarted.decide(
            "karen",
            "run_command",
            &json!({"program": "git", "args": ["push"]})
        ),
        None
    );
    assert_eq!(restarted.decide("main", "run_command", &args), None);
    // Remembering it again writes nothing new.
    assert!(!restarted.remember_allow("karen", "run_command", &args).unwrap());
}

#[test]
fn shared_rules_apply_to_every_agent_and_agent_rules_only_to_theirs() {
    let home = Home::new("layers");
    home.write(
        "approvals.yaml",
        "# people edit this\n- { tool: run_command, args: { program: \"git\" }, decision: allow }\n\
         - { tool: run_command, args: { program: \"rm\" }, decision: deny }\n\
         - { tool: write_file, args: { path: \"notes/*\" }, decision: allow }\n",
    );
    home.write("approvals/karen.yaml", "- { tool: housing_watch, decision: allow }\n- { tool: run_command, args: { program: git }, decision: deny }\n");
    let rules = home.rules();
    let git = json!({"program": "git", "args": []});
    assert_eq!(
        rules.decide("main", "run_command", &git).map(|d| d.0),
        Some(RuleDecision::Allow)
    );
    assert_eq!(
        rules.decide("karen", "run_command", &git).map(|d| d.0),
        Some(RuleDecision::Deny),
        "the agent's file comes first"
    );
    assert_eq!(
        rules
            .decide("karen", "housing_watch", &json!({"region": "서울"}))
            .map(|d| d.0),
        Some(RuleDecision::Allow)
    );
    assert_eq!(
        rules.decide("main", "housing_watch", &json!({})),
        None,
        "karen's rules are hers"
    );
    assert_eq!(
        rules
            .decide("main", "run_command", &json!({"program": "rm"}))
            .map(|d| d.0),
        Some(RuleDecision::Deny)
    );
    assert_eq!(
        rules
            .decide("main", "write_file", &json!({"path": "notes/a/b.md"}))
            .map(|d| d.0),
        Some(RuleDecision::Allow)
    );
    assert_eq!(
        rules.decide("main", "write_file", &json!({"path": "secrets.txt"})),
        None
    );
    assert_eq!(
        rules.decide("main", "run_command", &json!({})),
        None,
        "a named argument must be present"
    );
    // People edit the file while the server runs: the change applies.
    home.write("approvals.yaml", "- { tool: \"*\", decision: deny }\n");
    assert_eq!(
        rules
            .decide("main", "write_file", &json!({"path": "notes/x"}))
            .map(|d| d.0),
        Some(RuleDecision::Deny)
    );
}

#[test]
fn bad_rule_files_lose_nothing_else() {
    let home = Home::new("bad");
    home.write(
        "approvals.yaml",
        "- { tool: read_file, decision: maybe }\n- { tool: list_dir, decision: allow }\n- [oops]\n",
    );
    home.write("approvals/main.yaml", "{ this is: [not, a, list\n");
    let rules = home.rules();
    assert_eq!(
        rules.decide("main", "list_dir", &json!({})).map(|d| d.0),
        Some(RuleDecision::Allow),
        "good rules still apply"
    );
    assert_eq!(
        rules.decide("main", "read_file", &json!({})),
        None,
        "the bad rule is skipped"
    );
    // "Always allow" never overwrites a file a person broke.
    let err = rules
        .remember_allow("main", "run_command", &json!({"program": "ls"}))
        .unwrap_err();
    assert!(err.to_string().contains("left unchanged"), "{err}");
    assert_eq!(home.read("approvals/main.yaml"), "{ this is: [not, a, list\n");
    // An id that could name a path elsewhere is refused.
    assert!(rules.remember_allow("../evil", "x", &json!({})).is_err());
    assert!(!home.0.join("evil.yaml").exists());
    // An empty flow list is replaced, comments kept where they can be.
    home.write("approvals/karen.yaml", "[]\n");
    assert!(rules.remember_allow("karen", "x", &json!({"a": "*"})).unwrap());
    let text = home.read("approvals/karen.yaml");
    assert_eq!(
        rules.decide("karen", "x", &json!({"a": "*"})).map(|d| d.0),
        Some(RuleDecision::Allow),
        "{text}"
    );
    assert_eq!(
        rules.decide("karen", "x", &json!({"a": "anything"})),
        None,
        "remembered values are literal, not globs"
    );
}

#[tokio::test]
async fn rules_and_tool_flags_decide_before_anyone_is_asked() {
    let home = Home::new("flags");
    home.write("approvals.yaml", "- { tool: run_command, args: { program: git }, decision: allow }\n- { tool: read_file, args: { path: \".env\" }, decision: deny }\n");
    let broker = broker(&home).with_ask_always(["run_command".to_owned()]);
    let (a, mut rx) = screen();
    let _t = broker.attach(a);
    let env = json!({"path": ".env"});
    assert_eq!(
        broker.approve(&call("main", "read_file", &env, false)).await,
        ApprovalDecision::Deny,
        "a deny rule"
    );
    let other = json!({"path": "a.txt"});
    assert_eq!(
        broker.approve(&call("main", "read_file", &other, false)).await,
        ApprovalDecision::Allow,
        "no approval needed"
    );
    // boundaries.ask: asks even though a rule allows; "always" writes nothing.
    let git = json!({"program": "git"});
    let info = call("main", "run_command", &git, true);
    let answer = async {
        let r = rx.recv().await.unwrap();
        broker.decide(&r.request_id, ApprovalDecision::Always);
    };
    let (decision, ()) = tokio::join!(broker.approve(&info), answer);
    assert_eq!(decision, ApprovalDecision::Always);
    assert!(!home.0.join("approvals/main.yaml").exists());
}

#[test]
fn the_allow_list_and_never_boundaries() {
    let policy = AgentToolPolicy::new("karen", Some(["sh_notice".to_owned(), "run_command".to_owned()]))
        .with_boundaries(&Boundaries {
            ask: vec![],
            never: vec!["run_command".into()],
        });
    let args = json!({});
    assert_eq!(
        policy.check(&call("karen", "sh_notice", &args, false)),
        GateDecision::Allow
    );
    let never = policy.check(&call("karen", "run_command", &args, true));
    assert!(
        matches!(&never, GateDecision::Deny(r) if r.contains("never allowed")),
        "{never:?}"
    );
    let other = policy.check(&call("karen", "write_file", &args, true));
    assert!(
        matches!(&other, GateDecision::Deny(r) if r.contains("not one of agent karen's tools")),
        "{other:?}"
    );
    let open = AgentToolPolicy::new("main", None::<Vec<String>>);
    assert_eq!(
        open.check(&call("main", "anything", &args, false)),
        GateDecision::Allow
    );
}

#[tokio::test]
async fn a_person_approves_a_loop_tool_call_from_a_screen() {
    let home = Home::new("loop");
    let broker = broker(&home);
    let (a, mut rx) = screen();
    let _t = broker.attach(a);
    let mut turn = crate::support::Turn::new(
        "replies: [ { tool_calls: [ { name: write_file, arguments: { path: a.txt, content: hi } } ] }, { text: saved } ]",
    )
    .tool(FnTool::new("write_file", |_| Ok(ToolResult::ok("written"))).asking_approval());
    turn.gate = ToolGate::new()
        .with_policy(Arc::new(AgentToolPolicy::new(
            "main",
            Some(["write_file".to_owned()]),
        )))
        .with_approver(Arc::new(broker.clone()));
    let person = async {
        let r = rx.recv().await.unwrap();
        assert_eq!(r.tool_name, "write_file");
        broker.decide(&r.request_id, ApprovalDecision::Allow);
    };
    let (run, ()) = tokio::join!(turn.run(), person);
    let Message::Tool(result) = &run.outcome.new_messages[1] else {
        panic!()
    };
    assert_eq!((result.content.as_str(), result.is_error), ("written", false));
    assert_eq!(run.outcome.final_message.content, "saved");
}

/// A deployment's rule store that cannot be reached: its rules are
/// skipped (the call falls through to the shared file, or is asked about),
/// and "always allow" reports the failure instead of writing a file.
#[tokio::test]
async fn an_unreachable_deployment_rule_store_is_skipped_not_trusted() {
    use jarvis_sdk::turn::{ApprovalRule, RuleSource, SharedRuleStore};

    #[derive(Debug)]
    struct Down;
    #[async_trait::async_trait]
    impl SharedRuleStore for Down {
        async fn rules(&self, _agent_id: &str) -> Result<Vec<ApprovalRule>, String> {
            Err("connection refused".into())
        }
        async fn add(&self, _agent_id: &str, _rule: &ApprovalRule) -> Result<bool, String> {
            Err("connection refused".into())
        }
    }

    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("approvals.yaml"),
        "- { tool: web_fetch, decision: allow }\n",
    )
    .unwrap();
    let rules = LayeredApprovalRules::new(home.path()).with_shared(Arc::new(Down));
    let args = json!({"url": "https://example.com"});
    let fetch = ToolCallInfo::new("s1", "main", "c1", "web_fetch", &args, true);
    assert!(matches!(
        rules.decide_gate(&fetch).await,
        Some((RuleDecision::Allow, RuleSource::Shared(_)))
    ));
    let write = ToolCallInfo::new("s1", "main", "c2", "write_file", &args, true);
    assert_eq!(rules.decide_gate(&write).await, None, "asked about");
    let error = rules.remember("main", "write_file", &args).await.unwrap_err();
    assert!(error.to_string().contains("connection refused"), "{error}");
    assert!(!home.path().join("approvals").exists(), "no file instead");
}

/// An answer that reaches a node with a session it just took over, before
/// the turn it resumes there asks again: kept, and applied the moment the
/// request (the same id, from the adopted journal) is asked; the screens
/// still see it asked and resolved.
#[tokio::test]
async fn an_answer_given_before_a_resumed_turn_asks_again_is_applied_when_it_does() {
    use jarvis_sdk::agent::{TurnBegin, TurnJournal};
    use jarvis_sdk::common::{ManualClock, Timestamp};

    let home = Home::new("early");
    let clock = Arc::new(ManualClock::new(std::time::UNIX_EPOCH + Duration::from_secs(10)));
    // What the node that stopped recorded: the turn asked `approval_9`.
    let source = TurnJournal::in_memory();
    source.begin(TurnBegin {
        turn_id: "t1".into(),
        session_id: "s1".into(),
        agent_id: "main".into(),
        at: Timestamp::from_millis(1_000),
        prompt: "git status".into(),
        parent: None,
        resumable: true,
    });
    let args = json!({"program": "git", "args": ["status"]});
    let asked = ApprovalRequest {
        request_id: "approval_9".into(),
        session_id: "s1".into(),
        agent_id: "main".into(),
        tool_name: "run_command".into(),
        args: args.clone(),
    };
    source
        .ask("t1", "c1", &asked, Timestamp::from_millis(2_000))
        .await
        .unwrap();
    let journal = Arc::new(TurnJournal::in_memory());
    assert!(journal.adopt(&source.in_progress()[0]).await.unwrap());

    let broker = broker(&home).with_journal(journal.clone(), clock);
    let (a, mut a_rx) = screen();
    let _ta = broker.attach(a.clone());
    broker.decide_early("approval_9", ApprovalDecision::Allow);
    assert!(broker.pending().is_empty(), "nothing is asked yet");
    let info = ToolCallInfo {
        turn_id: "t1",
        ..call("main", "run_command", &args, true)
    };
    assert_eq!(broker.approve(&info).await, ApprovalDecision::Allow);
    assert_eq!(a_rx.recv().await.unwrap(), asked, "asked again under its id");
    assert_eq!(
        *a.resolved.lock().unwrap(),
        [("approval_9".to_owned(), ApprovalDecision::Allow)]
    );
    assert!(journal.undecided("t1", "c1").is_none(), "the answer is journaled");

    // An answer for a request that waits is applied at once.
    let other = json!({"program": "git", "args": ["log"]});
    let info = call("main", "run_command", &other, true);
    let waiting = broker.approve(&info);
    let answer = async {
        let request = a_rx.recv().await.unwrap();
        broker.decide_early(&request.request_id, ApprovalDecision::Deny);
    };
    let (decision, ()) = tokio::join!(waiting, answer);
    assert_eq!(decision, ApprovalDecision::Deny);
}
