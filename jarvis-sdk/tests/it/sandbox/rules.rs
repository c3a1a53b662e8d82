//! Approval rules match what runs, through the loop with the real broker
//! and the built-in tools: `notes/*` does not allow `notes/../x` (and the
//! write goes where the normalised path says), a climbing path is refused
//! before any rule or person sees it, `deny rm` catches `/bin/rm`,
//! `/usr/bin/rm` and a `./rm` placed in the sandbox, and `allow git` does not
//! allow a `./git` written into the sandbox.

use async_trait::async_trait;
use jarvis_sdk::agent::{
    AgentIdentity, AgentLoopConfig, ApprovalDecision, ApprovalRequest, BeforeToolCall, GateDecision,
    LoopContext, ToolCallInfo, ToolGate, ToolRegistry, UIAdapter, run_agent_loop,
};
use jarvis_sdk::common::SequentialIds;
use jarvis_sdk::model::{FauxProvider, Message, ToolResultMessage};
use jarvis_sdk::turn::{ApprovalBroker, BuiltinConfig, LayeredApprovalRules, builtin_tools};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A person at the session's screen who answers every request with one
/// decision and remembers what was asked.
struct Person {
    broker: Mutex<Option<ApprovalBroker>>,
    decision: ApprovalDecision,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl UIAdapter for Person {
    fn on_approval_request(&self, request: &ApprovalRequest) {
        self.asked.lock().unwrap().push(request.clone());
        let broker = self.broker.lock().unwrap().clone();
        if let Some(broker) = broker {
            broker.decide(&request.request_id, self.decision);
        }
    }
}

/// Counts the calls that reach the plugin stage.
struct Counter(Arc<AtomicUsize>);

#[async_trait]
impl BeforeToolCall for Counter {
    fn name(&self) -> &str {
        "counter"
    }
    async fn before_tool_call(&self, _call: &ToolCallInfo<'_>) -> GateDecision {
        self.0.fetch_add(1, Ordering::SeqCst);
        GateDecision::Allow
    }
}

/// A home with a rule file, the session `s1`'s sandbox and a person who
/// answers with `decision`.
struct Setup {
    home: tempfile::TempDir,
    person: Arc<Person>,
    reached_plugins: Arc<AtomicUsize>,
}

impl Setup {
    fn new(rules: &str, decision: ApprovalDecision) -> Self {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("approvals.yaml"), rules).unwrap();
        std::fs::create_dir_all(home.path().join("sandboxes/s1")).unwrap();
        Self {
            home,
            person: Arc::new(Person {
                broker: Mutex::default(),
                decision,
                asked: Mutex::default(),
            }),
            reached_plugins: Arc::default(),
        }
    }

    fn sandbox(&self) -> PathBuf {
        self.home.path().join("sandboxes/s1")
    }

    /// An executable script in the sandbox that touches `marker` there.
    fn plant(&self, name: &str, marker: &str) -> PathBuf {
        let path = self.sandbox().join(name);
        std::fs::write(
            &path,
            format!("#!/bin/sh\ntouch '{}'\n", self.sandbox().join(marker).display()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn asked(&self) -> Vec<ApprovalRequest> {
        std::mem::take(&mut *self.person.asked.lock().unwrap())
    }

    /// One call of `tool` through the loop in session `s1`.
    async fn call(&self, tool: &str, args: Value) -> ToolResultMessage {
        let script = json!({
            "replies": [
                {"tool_calls": [{"name": tool, "arguments": args}]},
                {"text": "done"}
            ]
        });
        let faux = FauxProvider::from_yaml(&script.to_string()).unwrap();
        let broker = ApprovalBroker::new(
            "s1",
            Arc::new(LayeredApprovalRules::new(self.home.path())),
            Arc::new(SequentialIds::default()),
        )
        .with_timeout(std::time::Duration::from_secs(30));
        let _attached = broker.attach(self.person.clone());
        *self.person.broker.lock().unwrap() = Some(broker.clone());
        let mut tools = ToolRegistry::new();
        for tool in builtin_tools(BuiltinConfig::for_home(self.home.path())) {
            tools.register(tool).unwrap();
        }
        let ctx = LoopContext::new(Arc::new(faux))
            .with_tools(tools)
            .with_gate(
                ToolGate::new()
                    .with_hook(Arc::new(Counter(self.reached_plugins.clone())))
                    .with_approver(Arc::new(broker)),
            )
            .with_identity(AgentIdentity {
                agent_id: "main".into(),
                agent_name: "J.A.R.V.I.S.".into(),
                session_id: "s1".into(),
            });
        let outcome = run_agent_loop(
            &ctx,
            &AgentLoopConfig::default(),
            vec![Message::user("go")],
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        outcome
            .new_messages
            .into_iter()
            .find_map(|m| match m {
                Message::Tool(r) => Some(r),
                _ => None,
            })
            .expect("a tool result")
    }
}

#[tokio::test]
async fn a_path_rule_does_not_allow_a_path_that_climbs_out_of_its_directory() {
    let rules = "- { tool: write_file, args: { path: \"notes/*\" }, decision: allow }\n";
    // The person refuses: a call the rule does not cover is not written.
    let setup = Setup::new(rules, ApprovalDecision::Deny);
    let r = setup
        .call("write_file", json!({"path": "notes/../x.txt", "content": "x"}))
        .await;
    assert!(r.is_error && r.content.contains("refused by approval"), "{r:?}");
    let asked = setup.asked();
    assert_eq!(asked.len(), 1, "the rule did not cover it, so a person was asked");
    assert_eq!(
        asked[0].args["path"], "x.txt",
        "people see the path that will be written"
    );
    assert!(!setup.sandbox().join("x.txt").exists());

    // Covered by the rule: no one is asked and the file lands where the
    // normalised path says.
    let r = setup
        .call(
            "write_file",
            json!({"path": "notes/./a/../b.txt", "content": "b"}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    assert!(setup.asked().is_empty());
    assert_eq!(
        std::fs::read_to_string(setup.sandbox().join("notes/b.txt")).unwrap(),
        "b"
    );

    // Allowed by the person: written at the normalised path, not in notes/.
    let setup = Setup::new(rules, ApprovalDecision::Allow);
    let r = setup
        .call("write_file", json!({"path": "notes/../x.txt", "content": "x"}))
        .await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(setup.sandbox().join("x.txt")).unwrap(),
        "x"
    );
    assert!(!setup.sandbox().join("notes").exists());
}

#[tokio::test]
async fn a_climbing_path_is_refused_before_any_rule_or_person() {
    let rules = "- { tool: write_file, decision: allow }\n- { tool: read_file, decision: allow }\n";
    let setup = Setup::new(rules, ApprovalDecision::Allow);
    for (tool, args) in [
        (
            "write_file",
            json!({"path": "notes/../../escaped.txt", "content": "x"}),
        ),
        ("read_file", json!({"path": "../../approvals.yaml"})),
        ("list_dir", json!({"path": ".."})),
    ] {
        let r = setup.call(tool, args).await;
        assert!(
            r.is_error && r.content.contains("leads outside the sandbox"),
            "{r:?}"
        );
    }
    assert_eq!(
        setup.reached_plugins.load(Ordering::SeqCst),
        0,
        "no stage saw them"
    );
    assert!(setup.asked().is_empty());
    assert!(!setup.home.path().join("escaped.txt").exists());
    assert!(!setup.home.path().join("sandboxes/escaped.txt").exists());
}

#[tokio::test]
async fn a_deny_rule_on_a_name_catches_every_path_to_a_program_of_that_name() {
    // Everything else is allowed, so only the deny rule stands between.
    let rules = "- { tool: run_command, args: { program: rm }, decision: deny }\n\
                 - { tool: run_command, decision: allow }\n";
    let setup = Setup::new(rules, ApprovalDecision::Allow);
    let victim = setup.sandbox().join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    setup.plant("rm", "planted-rm-ran");
    std::fs::create_dir_all(setup.sandbox().join("bin")).unwrap();
    setup.plant("bin/rm", "nested-rm-ran");
    let victim_arg = victim.display().to_string();
    for program in ["rm", "/bin/rm", "/usr/bin/rm", "./rm", "bin/../rm", "bin/rm"] {
        if program.starts_with('/') && !Path::new(program).exists() {
            continue;
        }
        let r = setup
            .call(
                "run_command",
                json!({"program": program, "args": ["-f", victim_arg]}),
            )
            .await;
        assert!(
            r.is_error && r.content.contains("refused by approval"),
            "{program}: {r:?}"
        );
    }
    assert!(victim.exists(), "no rm ran");
    assert!(!setup.sandbox().join("planted-rm-ran").exists());
    assert!(!setup.sandbox().join("nested-rm-ran").exists());
    assert!(setup.asked().is_empty(), "the rules decided; nobody was asked");
    // Other programs still run.
    let r = setup.call("run_command", json!({"program": "true"})).await;
    assert!(!r.is_error, "{r:?}");
}

#[tokio::test]
async fn an_allow_rule_on_a_name_does_not_allow_a_same_named_file_in_the_sandbox() {
    let rules = "- { tool: run_command, args: { program: git }, decision: allow }\n";
    let setup = Setup::new(rules, ApprovalDecision::Deny);
    let r = setup
        .call("run_command", json!({"program": "git", "args": ["--version"]}))
        .await;
    assert!(!r.is_error && r.content.contains("git version"), "{r:?}");
    assert!(setup.asked().is_empty(), "git on PATH is allowed by the rule");

    setup.plant("git", "fake-git-ran");
    for program in ["./git", "git/../git"] {
        let r = setup.call("run_command", json!({"program": program})).await;
        assert!(r.is_error && r.content.contains("refused by approval"), "{r:?}");
        let asked = setup.asked();
        assert_eq!(asked.len(), 1, "{program}: a person was asked");
        let file = asked[0].args["file"].as_str().unwrap().to_owned();
        assert_eq!(
            Path::new(&file),
            std::fs::canonicalize(setup.sandbox().join("git")).unwrap(),
            "people see the file that would run"
        );
    }
    assert!(!setup.sandbox().join("fake-git-ran").exists());
}

#[tokio::test]
async fn a_path_rule_matches_the_canonical_file() {
    // `/bin/sh` names the same file as its canonical path; a relative
    // pattern names a file in the sandbox.
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let rules = "- { tool: run_command, args: { program: \"/bin/sh\" }, decision: allow }\n\
                 - { tool: run_command, args: { program: \"./scripts/*\" }, decision: allow }\n";
    let setup = Setup::new(rules, ApprovalDecision::Deny);
    for program in ["sh", "/bin/sh", &sh.display().to_string()] {
        let r = setup
            .call(
                "run_command",
                json!({"program": program, "args": ["-c", "exit 0"]}),
            )
            .await;
        assert!(!r.is_error, "{program}: {r:?}");
    }
    std::fs::create_dir_all(setup.sandbox().join("scripts")).unwrap();
    setup.plant("scripts/build.sh", "built");
    let r = setup
        .call("run_command", json!({"program": "scripts/build.sh"}))
        .await;
    assert!(!r.is_error, "{r:?}");
    assert!(setup.sandbox().join("built").exists());
    assert!(setup.asked().is_empty());
    // A file outside `scripts/` is not covered.
    setup.plant("other.sh", "other");
    let r = setup.call("run_command", json!({"program": "./other.sh"})).await;
    assert!(r.is_error, "{r:?}");
    assert_eq!(setup.asked().len(), 1);
}
