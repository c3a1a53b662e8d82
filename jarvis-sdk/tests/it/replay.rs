//! Cassettes and replay: a three-turn session with a tool, an approval and
//! an empty-answer nudge is recorded line by line; replayed against the
//! current code it runs the same without calling the tool again; a changed
//! tool description and a changed approval rule are each reported at the
//! turn they change, with what the recording and the run had; `/forget`
//! takes the forgotten text out of the cassette.

use async_trait::async_trait;
use jarvis_sdk::agent::{
    AgentEvent, ApprovalDecision, ApprovalRequest, Tool, ToolContext, ToolError, ToolResult, UIAdapter,
};
use jarvis_sdk::app::{
    AppAssembly, AppConfig, Pack, PackContext, PackParts, ReplayAgainst, build_app, replay_cassette,
};
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::turn::{ApprovalBroker, Caller};
use jarvis_sdk::turn::{
    cassette::Cassette, cassette::CassetteLine, cassette::Exchange, cassette::RecordedKind,
    cassette::forget_in_cassettes,
};
use serde_json::{Value, json};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const SCRIPT: &str = r#"
rules:
  - when: { last_user: "셋", purpose: nudge }
    reply: { text: "셋째 답" }
  - when: { last_user: "셋" }
    reply: { text: "" }
  - when: { last_user: "하나", last_role: user }
    reply: { tool_calls: [ { name: lookup, arguments: { q: "방 개수" } } ] }
  - when: { last_user: "하나", last_role: tool }
    reply: { text: "첫째 답" }
  - when: { last_user: "둘", last_role: user }
    reply: { tool_calls: [ { name: write_file, arguments: { path: "note.txt", content: "x" } } ] }
  - when: { last_user: "둘", last_role: tool }
    reply: { text: "둘째 답" }
fallback: { text: "네" }
"#;

const PROMPTS: [&str; 3] = ["하나 알려 줘", "둘 적어 줘", "셋 말해 줘"];

/// A tool whose description the test chooses, counting its runs.
struct Lookup {
    description: &'static str,
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Lookup {
    fn name(&self) -> &str {
        "lookup"
    }

    fn description(&self) -> &str {
        self.description
    }

    fn parameters(&self) -> Value {
        json!({ "type": "object", "properties": { "q": { "type": "string" } } })
    }

    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(ToolResult::ok("방은 3개"))
    }
}

struct LookupPack(Arc<Lookup>);

impl std::fmt::Debug for LookupPack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LookupPack")
    }
}

impl Pack for LookupPack {
    fn name(&self) -> &str {
        "lookup"
    }

    fn build(&self, _cx: &PackContext<'_>) -> Result<PackParts, String> {
        Ok(PackParts::new().with_tool(self.0.clone()))
    }
}

/// Allows every approval request at once.
struct Allow(ApprovalBroker);

impl UIAdapter for Allow {
    fn on_event(&self, _event: &AgentEvent) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn on_approval_request(&self, request: &ApprovalRequest) {
        self.0.decide(&request.request_id, ApprovalDecision::Allow);
    }

    fn on_approval_resolved(&self, _request_id: &str, _decision: ApprovalDecision) {}
}

fn config(home: &Path, description: &'static str, runs: &Arc<AtomicUsize>) -> AppConfig {
    let faux = Arc::new(FauxProvider::from_yaml(SCRIPT).unwrap());
    let mut config = AppConfig::embedded(home).with_provider(faux);
    config.packs = vec![Arc::new(LookupPack(Arc::new(Lookup {
        description,
        runs: runs.clone(),
    })))];
    config
}

/// Records the three turns; answers the app and the cassette's path.
async fn record(home: &Path, runs: &Arc<AtomicUsize>) -> (AppAssembly, std::path::PathBuf) {
    let mut config = config(home, "방 정보를 찾는다", runs);
    config.record = true;
    let app = build_app(config).await.unwrap();
    let meta = app.create_session(Some("main")).await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    let _allow = session.attach(Arc::new(Allow(session.broker().clone())));
    let mut answers = Vec::new();
    for prompt in PROMPTS {
        answers.push(
            session
                .prompt(prompt, Caller::Local)
                .await
                .unwrap()
                .final_message
                .content,
        );
    }
    assert_eq!(answers, ["첫째 답", "둘째 답", "셋째 답"]);
    let path = home.join("cassettes").join(format!("{}.jsonl", meta.id));
    (app, path)
}

#[tokio::test]
async fn a_recorded_session_replays_the_same_against_the_current_code() {
    let home = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let (_app, path) = record(home.path(), &runs).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the tool ran once while recording"
    );

    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<CassetteLine> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let raw: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(raw.iter().all(|l| l["v"] == 1), "every line is version 1");
    let kinds: Vec<&str> = raw.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "model").count(), 6, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "tool").count(), 2, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "approval").count(), 1, "{kinds:?}");
    let first = &raw[0];
    assert_eq!(
        (first["turn"].as_u64(), first["call"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(first["purpose"], "step");
    assert_eq!(first["prompt"], PROMPTS[0]);
    assert!(
        first["request"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "lookup")
    );
    assert!(
        first["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["t_ms"].is_u64())
    );
    let tool = raw
        .iter()
        .find(|l| l["type"] == "tool" && l["tool"] == "lookup")
        .unwrap();
    assert_eq!(
        (tool["turn"].as_u64(), tool["result"].as_str()),
        (Some(1), Some("방은 3개"))
    );
    assert_eq!(tool["args"], json!({ "q": "방 개수" }));
    let approval = raw.iter().find(|l| l["type"] == "approval").unwrap();
    assert_eq!(
        (approval["turn"].as_u64(), approval["decision"].as_str()),
        (Some(2), Some("allow"))
    );
    assert!(approval["request_id"].as_str().is_some_and(|id| !id.is_empty()));
    let written = raw
        .iter()
        .find(|l| l["type"] == "tool" && l["tool"] == "write_file")
        .unwrap();
    assert_eq!(
        approval["call_id"], written["call_id"],
        "the approval names its call"
    );
    let nudge = lines.iter().find_map(|l| match &l.exchange {
        Exchange::Model(m) if m.turn == 3 && m.call == 2 => Some(m),
        _ => None,
    });
    let nudge = nudge.expect("turn 3's second call is the nudge");
    assert_eq!(nudge.purpose.as_str(), "nudge");
    assert!(matches!(
        nudge.events.last().map(|e| &e.event),
        Some(RecordedKind::Stop { .. })
    ));

    let cassette = Cassette::read(&path).unwrap();
    let report = replay_cassette(
        &cassette,
        &config(home.path(), "방 정보를 찾는다", &runs),
        ReplayAgainst::Current,
    )
    .await
    .unwrap();
    assert!(report.same(), "{report}");
    assert_eq!(report.turns.len(), 3);
    assert_eq!(
        report
            .turns
            .iter()
            .map(|t| (t.calls, t.recorded_calls))
            .collect::<Vec<_>>(),
        [(2, 2), (2, 2), (2, 2)]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "a replay never runs the tool");
    assert!(report.to_string().contains("same: 3 turns"), "{report}");
}

#[tokio::test]
async fn a_changed_tool_description_or_approval_rule_is_reported_at_its_turn() {
    let home = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let (_app, path) = record(home.path(), &runs).await;
    let cassette = Cassette::read(&path).unwrap();

    let changed = config(home.path(), "방 정보를 찾아 준다", &runs);
    let report = replay_cassette(&cassette, &changed, ReplayAgainst::Current)
        .await
        .unwrap();
    assert!(!report.same());
    let first = &report.turns[0];
    let difference = first
        .difference
        .as_ref()
        .expect("turn 1 sends the new description");
    assert_eq!(difference.call, Some(1));
    assert!(difference.what.contains("description"), "{report}");
    assert_eq!(difference.recorded.as_deref(), Some("\"방 정보를 찾는다\""));
    assert_eq!(difference.now.as_deref(), Some("\"방 정보를 찾아 준다\""));
    assert!(
        report
            .to_string()
            .contains("turn 1 \"하나 알려 줘\": DIFFERS at call 1"),
        "{report}"
    );

    // A rule now allows write_file: turn 2 no longer asks a person, and
    // only turn 2 differs (its tool result still comes from the cassette).
    std::fs::write(
        home.path().join("approvals.yaml"),
        "- { tool: write_file, decision: allow }\n",
    )
    .unwrap();
    let report = replay_cassette(
        &cassette,
        &config(home.path(), "방 정보를 찾는다", &runs),
        ReplayAgainst::Current,
    )
    .await
    .unwrap();
    let differing: Vec<u32> = report.differing().map(|t| t.turn).collect();
    assert_eq!(differing, [2], "{report}");
    let what = &report.turns[1].difference.as_ref().unwrap().what;
    assert!(what.contains("approve write_file"), "{what}");
}

#[tokio::test]
async fn forgetting_rewrites_the_cassette_without_the_text() {
    let home = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let (app, path) = record(home.path(), &runs).await;
    let before = std::fs::read_to_string(&path).unwrap();
    assert!(before.contains("방은 3개"));
    let lines_before = before.lines().count();

    // The /forget command of the recorded session's agent.
    let meta = app.create_session(Some("main")).await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    let reply = session.prompt("/forget 방은 3개", Caller::Local).await.unwrap();
    assert!(
        reply.final_message.content.contains("cassette lines removed"),
        "{reply:?}"
    );

    let after = std::fs::read_to_string(&path).unwrap();
    assert!(!after.contains("방은 3개"), "{after}");
    assert!(after.lines().count() < lines_before);
    assert!(
        after
            .lines()
            .all(|l| serde_json::from_str::<CassetteLine>(l).is_ok())
    );
    assert_eq!(
        forget_in_cassettes(&home.path().join("cassettes"), "방은 3개").unwrap(),
        0
    );
}

#[tokio::test]
async fn a_cassette_that_is_not_one_is_refused_with_its_line() {
    let error = Cassette::parse("{\"v\":1,\"type\":\"model\"}\n").unwrap_err();
    assert!(error.to_string().starts_with("line 1:"), "{error}");
    let error = Cassette::parse("not json\n").unwrap_err();
    assert!(error.to_string().starts_with("line 1:"), "{error}");
    let error = Cassette::parse("").unwrap_err();
    assert!(error.to_string().contains("no model call"), "{error}");
    let v2 =
        r#"{"v":2,"type":"tool","turn":1,"call_id":"c","tool":"t","args":{},"result":"","is_error":false}"#;
    assert!(Cassette::parse(v2).unwrap_err().to_string().contains("version 2"));
}

#[tokio::test]
async fn against_the_model_requests_are_compared_and_unrecorded_tool_calls_never_run() {
    let home = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let (_app, path) = record(home.path(), &runs).await;
    let cassette = Cassette::read(&path).unwrap();

    // The same model: the same requests, the recorded tool results.
    let mut same = config(home.path(), "방 정보를 찾는다", &runs);
    same.approval_timeout = std::time::Duration::from_secs(5);
    let report = replay_cassette(&cassette, &same, ReplayAgainst::Model)
        .await
        .unwrap();
    assert!(report.same(), "{report}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool did not run again");

    // A model that now looks up something else: that call is reported at
    // turn 1 and answered with an error, never run.
    let other = SCRIPT.replace("q: \"방 개수\"", "q: \"층수\"");
    let mut changed = config(home.path(), "방 정보를 찾는다", &runs);
    changed.provider = Some(Arc::new(FauxProvider::from_yaml(&other).unwrap()));
    let report = replay_cassette(&cassette, &changed, ReplayAgainst::Model)
        .await
        .unwrap();
    let first = report.turns[0].difference.as_ref().expect("turn 1 differs");
    assert!(
        first
            .what
            .contains("a call of lookup the recording does not have"),
        "{report}"
    );
    assert_eq!(first.now.as_deref(), Some("lookup({\"q\":\"층수\"})"));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "a replay never runs a real tool");
}

#[tokio::test]
async fn an_approval_asked_inside_a_delegation_is_recorded_but_not_expected_by_a_replay() {
    const DELEGATING: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "메모 남겨 줘" } } ] }
  - when: { agent: main, last_role: tool }
    reply: { text: "KAREN 이 남겼어요" }
  - when: { agent: karen, last_role: user }
    reply: { tool_calls: [ { name: write_file, arguments: { path: "memo.txt", content: "x" } } ] }
  - when: { agent: karen, last_role: tool }
    reply: { text: "남겼어요" }
"#;
    let home = tempfile::tempdir().unwrap();
    let config = || {
        AppConfig::embedded(home.path())
            .with_provider(Arc::new(FauxProvider::from_yaml(DELEGATING).unwrap()))
            .with_definition("karen", "name: KAREN\ndescription: 메모\n")
    };
    let mut recording = config();
    recording.record = true;
    let app = build_app(recording).await.unwrap();
    let meta = app.create_session(Some("main")).await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    let _allow = session.attach(Arc::new(Allow(session.broker().clone())));
    let outcome = session
        .prompt("KAREN 한테 메모 부탁해", Caller::Local)
        .await
        .unwrap();
    assert_eq!(outcome.final_message.content, "KAREN 이 남겼어요");

    let path = home.path().join("cassettes").join(format!("{}.jsonl", meta.id));
    let cassette = Cassette::read(&path).unwrap();
    let turn = &cassette.turns[&1];
    assert_eq!(
        turn.tools.iter().map(|t| t.tool.as_str()).collect::<Vec<_>>(),
        ["ask_agent"]
    );
    assert_eq!(
        turn.approvals.len(),
        1,
        "KAREN's write_file was asked here: {turn:?}"
    );
    assert_eq!(turn.approvals[0].tool, "write_file");
    assert_eq!(
        turn.own_approvals().count(),
        0,
        "but it was not a call of this turn"
    );

    let report = replay_cassette(&cassette, &config(), ReplayAgainst::Current)
        .await
        .unwrap();
    assert!(report.same(), "{report}");
}
