//! Sub-agents inside a turn, end to end on FauxProvider: definitions
//! (JARVIS's `main.yaml` and a team definition), `run_subagent`, wrapped
//! events, the child session, concurrency, overflow, approvals, abort,
//! depth and tool lists.

use async_trait::async_trait;
use jarvis_sdk::agent::{
    AgentEvent, ApprovalDecision, BeforeToolCall, GateDecision, SessionId, SessionKind, StopReason,
    ToolCallInfo,
};
use jarvis_sdk::app::{AppAssembly, AppConfig, build_app};
use jarvis_sdk::model::{ChatRequest, FauxProvider, Message, Purpose};
use jarvis_sdk::testing::RecordingAdapter;
use jarvis_sdk::turn::Caller;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Barrier, Notify};

use crate::team::Approving;

/// JARVIS with a researcher (read-only file tools) and a writer (asks).
const MAIN_YAML: &str = r#"
name: ignored, with a warning
subagents:
  - name: researcher
    description: "Reads files and summarises them"
    instructions: "You read the files you are given and answer with a short summary."
    tools: [read_file, list_dir]
    max_turns: 8
  - name: writer
    description: "Writes notes"
    instructions: "You write the note you are asked for."
    tools: [write_file]
    max_turns: 2
"#;

struct App {
    app: AppAssembly,
    faux: Arc<FauxProvider>,
    home: tempfile::TempDir,
}

async fn app_with(script: &str, main_yaml: &str, hooks: Vec<Arc<dyn BeforeToolCall>>) -> App {
    let home = tempfile::tempdir().unwrap();
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let mut config = AppConfig::embedded(home.path())
        .with_provider(faux.clone())
        .with_definition("main", main_yaml);
    config.hooks = hooks;
    let app = build_app(config).await.unwrap();
    App { app, faux, home }
}

async fn app(script: &str) -> App {
    app_with(script, MAIN_YAML, Vec::new()).await
}

fn by_agent(requests: &[ChatRequest], agent: &str) -> Vec<ChatRequest> {
    requests
        .iter()
        .filter(|r| r.metadata.agent_id == agent)
        .cloned()
        .collect()
}

fn tool_results(request: &ChatRequest) -> Vec<(String, bool, String)> {
    request
        .recorded_messages()
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some((t.tool_name.clone(), t.is_error, t.content.clone())),
            _ => None,
        })
        .collect()
}

/// The wrapped events of a screen: (parent call id, path, inner type).
fn wrapped(screen: &RecordingAdapter) -> Vec<(String, Vec<String>, AgentEvent)> {
    screen
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::SubagentEvent {
                parent_tool_call_id,
                agent_path,
                event,
            } => Some((parent_tool_call_id, agent_path, *event)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_parent_calls_one_subagent_and_gets_its_answer_with_wrapped_events_and_a_sub_session() {
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: run_subagent, arguments: { name: researcher, task: "x.txt 를 읽고 요약해" } } ] }
  - when: { agent: main.researcher, last_role: user }
    reply: { text: "읽어 보겠습니다", tool_calls: [ { name: read_file, arguments: { path: "x.txt" } } ] }
  - when: { agent: main.researcher, last_role: tool }
    reply: { text: "요약: 사과는 빨갛다" }
  - when: { agent: main, last_role: tool }
    reply: { text: "연구원이 말하길, 사과는 빨갛다" }
"#;
    let t = app(script).await;
    let meta = t.app.default_session("main").await.unwrap();
    std::fs::create_dir_all(t.home.path().join("sandboxes").join(meta.id.as_str())).unwrap();
    std::fs::write(
        t.home
            .path()
            .join("sandboxes")
            .join(meta.id.as_str())
            .join("x.txt"),
        "사과는 빨갛다",
    )
    .unwrap();
    let session = t.app.session(&meta.id).await.unwrap();
    let screen = Arc::new(RecordingAdapter::new());
    let _s = session.attach(screen.clone());
    let out = session.prompt("x.txt 요약해 줘", Caller::Local).await.unwrap();
    assert_eq!(out.final_message.content, "연구원이 말하길, 사과는 빨갛다");

    let requests = t.faux.requests();
    let researcher = by_agent(&requests, "main.researcher");
    assert_eq!(researcher.len(), 2);
    let first = &researcher[0];
    assert_eq!(
        first.system.as_deref(),
        Some("You read the files you are given and answer with a short summary.")
    );
    let offered: Vec<&str> = first.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["list_dir", "read_file"], "its own tools only");
    assert_eq!(
        first
            .recorded_messages()
            .iter()
            .map(|m| serde_json::to_value(m).unwrap()["content"].clone())
            .collect::<Vec<_>>(),
        [serde_json::json!("x.txt 를 읽고 요약해")],
        "the task is its whole conversation"
    );
    assert_eq!(
        tool_results(&researcher[1]),
        [("read_file".to_owned(), false, "사과는 빨갛다".to_owned())],
        "it read the parent's sandbox"
    );
    let main = by_agent(&requests, "main");
    let parent_sees = tool_results(main.last().unwrap());
    assert_eq!(parent_sees.len(), 1);
    assert_eq!(
        (
            parent_sees[0].0.as_str(),
            parent_sees[0].1,
            parent_sees[0].2.as_str()
        ),
        ("run_subagent", false, "요약: 사과는 빨갛다")
    );
    let main_tools: Vec<&str> = main[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert!(main_tools.contains(&"run_subagent"), "{main_tools:?}");
    let description = &main[0]
        .tools
        .iter()
        .find(|t| t.name == "run_subagent")
        .unwrap()
        .description;
    assert!(
        description.contains("researcher: Reads files and summarises them"),
        "{description}"
    );

    // Events: the turn's own start and end are the only unwrapped ones.
    let kinds = screen.kinds();
    assert_eq!(kinds.iter().filter(|k| **k == "agent_start").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "agent_end").count(), 1);
    assert_eq!(kinds.last().map(String::as_str), Some("agent_end"));
    let call_id = screen
        .events()
        .into_iter()
        .find_map(|e| match e {
            AgentEvent::ToolExecutionStart {
                tool_call_id,
                tool_name,
                ..
            } if tool_name == "run_subagent" => Some(tool_call_id),
            _ => None,
        })
        .unwrap();
    let inner = wrapped(&screen);
    assert!(
        inner
            .iter()
            .all(|(id, path, _)| *id == call_id && path == &["main", "researcher"]),
        "{inner:?}"
    );
    let inner_kinds: Vec<&str> = inner.iter().map(|(_, _, e)| e.kind()).collect();
    assert_eq!(inner_kinds.first(), Some(&"agent_start"));
    assert_eq!(inner_kinds.last(), Some(&"agent_end"));
    assert!(inner_kinds.contains(&"tool_execution_start") && inner_kinds.contains(&"message_update"));
    let json = serde_json::to_value(
        screen
            .events()
            .iter()
            .find(|e| e.kind() == "subagent_event")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(json["type"], "subagent_event");
    assert_eq!(json["agent_path"], serde_json::json!(["main", "researcher"]));
    assert_eq!(json["event"]["type"], "agent_start");
    assert_eq!(json["event"]["agent_id"], "main.researcher");

    // The run is recorded as a read-only child session.
    let sub = SessionId::new("sub-1").unwrap();
    let (sub_meta, entries) = t.app.session_entries(&sub).await.unwrap();
    assert_eq!(sub_meta.kind, SessionKind::Sub);
    let origin = sub_meta.sub.clone().unwrap();
    assert_eq!(
        (
            origin.parent_session_id.as_str(),
            origin.parent_tool_call_id.as_str(),
            origin.subagent.as_str()
        ),
        (meta.id.as_str(), call_id.as_str(), "main.researcher")
    );
    let meta_json = serde_json::to_value(&sub_meta).unwrap();
    assert_eq!(meta_json["kind"], "sub");
    assert_eq!(meta_json["parent_session_id"], meta.id.as_str());
    assert_eq!(meta_json["parent_tool_call_id"], call_id.as_str());
    let text = serde_json::to_string(&entries).unwrap();
    assert!(
        text.contains("x.txt 를 읽고 요약해") && text.contains("요약: 사과는 빨갛다"),
        "{text}"
    );
    let refused = t
        .app
        .session(&sub)
        .await
        .unwrap()
        .prompt("hi", Caller::Local)
        .await;
    assert!(refused.is_err(), "a sub session is read-only");

    // The next run counts on.
    let again = session.prompt("또 요약해 줘", Caller::Local).await.unwrap();
    assert_eq!(again.final_message.stop_reason, StopReason::Stop);
    assert!(
        t.app
            .session_entries(&SessionId::new("sub-2").unwrap())
            .await
            .is_ok()
    );
}

/// Holds calls of `list_dir` until two are waiting at once.
struct Rendezvous(Barrier);

#[async_trait]
impl BeforeToolCall for Rendezvous {
    fn name(&self) -> &str {
        "rendezvous"
    }
    async fn before_tool_call(&self, call: &ToolCallInfo<'_>) -> GateDecision {
        if call.tool_name == "list_dir" {
            self.0.wait().await;
        }
        GateDecision::Allow
    }
}

#[tokio::test]
async fn two_subagents_in_one_step_run_concurrently_and_answer_in_call_order() {
    let main_yaml = r#"
subagents:
  - { name: slow, tools: [list_dir] }
  - { name: quick, tools: [list_dir] }
"#;
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [
      { name: run_subagent, arguments: { name: slow, task: "a" } },
      { name: run_subagent, arguments: { name: quick, task: "b" } } ] }
  - when: { agent: main.slow, last_role: user }
    reply: { tool_calls: [ { name: list_dir, arguments: { path: "." } } ] }
  - when: { agent: main.quick, last_role: user }
    reply: { tool_calls: [ { name: list_dir, arguments: { path: "." } } ] }
  - when: { agent: main.slow, last_role: tool }
    reply: { text: "slow 의 답" }
  - when: { agent: main.quick, last_role: tool }
    reply: { text: "quick 의 답" }
  - when: { agent: main, last_role: tool }
    reply: { text: "둘 다 끝" }
"#;
    let t = app_with(script, main_yaml, vec![Arc::new(Rendezvous(Barrier::new(2)))]).await;
    let meta = t.app.default_session("main").await.unwrap();
    let session = t.app.session(&meta.id).await.unwrap();
    // Run one after the other, the first would wait at the barrier forever.
    let out = tokio::time::timeout(Duration::from_secs(30), session.prompt("둘 다", Caller::Local))
        .await
        .expect("the two sub-agents ran at the same time")
        .unwrap();
    assert_eq!(out.final_message.content, "둘 다 끝");
    let main = by_agent(&t.faux.requests(), "main");
    let results: Vec<String> = tool_results(main.last().unwrap())
        .into_iter()
        .map(|r| r.2)
        .collect();
    assert_eq!(results, ["slow 의 답", "quick 의 답"], "results in call order");
}

#[tokio::test]
async fn a_subagent_overflows_summarises_once_and_continues() {
    let main_yaml = "subagents:\n  - { name: looper, tools: [list_dir], max_turns: 1 }\n";
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: run_subagent, arguments: { name: looper, task: "목록" } } ] }
  - when: { agent: main.looper, purpose: summary }
    reply: { text: "지금까지 목록을 봤다" }
  - when: { agent: main.looper, purpose: continuation }
    reply: { text: "이어서 끝냈다" }
  - when: { agent: main.looper, last_role: user }
    reply: { tool_calls: [ { name: list_dir, arguments: { path: "." } } ] }
  - when: { agent: main, last_role: tool }
    reply: { text: "끝" }
"#;
    let t = app_with(script, main_yaml, Vec::new()).await;
    let meta = t.app.default_session("main").await.unwrap();
    let out = t
        .app
        .session(&meta.id)
        .await
        .unwrap()
        .prompt("돌려", Caller::Local)
        .await
        .unwrap();
    assert_eq!(out.final_message.content, "끝");
    let looper: Vec<Purpose> = by_agent(&t.faux.requests(), "main.looper")
        .iter()
        .map(|r| r.purpose)
        .collect();
    assert_eq!(looper, [Purpose::Step, Purpose::Summary, Purpose::Continuation]);
    let main = by_agent(&t.faux.requests(), "main");
    assert_eq!(tool_results(main.last().unwrap())[0].2, "이어서 끝냈다");
}

#[tokio::test]
async fn a_subagents_approval_reaches_the_parent_sessions_screen() {
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: run_subagent, arguments: { name: writer, task: "note.txt 에 안녕 이라고 써" } } ] }
  - when: { agent: main.writer, last_role: user }
    reply: { tool_calls: [ { name: write_file, arguments: { path: "note.txt", content: "안녕" } } ] }
  - when: { agent: main.writer, last_role: tool }
    reply: { text: "썼다" }
  - when: { agent: main, last_role: tool }
    reply: { text: "메모를 남겼다" }
"#;
    let t = app(script).await;
    let meta = t.app.default_session("main").await.unwrap();
    let session = t.app.session(&meta.id).await.unwrap();
    let screen = Arc::new(Approving {
        app: t.app.clone(),
        session: meta.id.clone(),
        decision: ApprovalDecision::Allow,
        seen: Mutex::default(),
    });
    let _s = session.attach(screen.clone());
    let out = session.prompt("메모 남겨", Caller::Local).await.unwrap();
    assert_eq!(out.final_message.content, "메모를 남겼다");
    let seen = screen.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].tool_name.as_str(), seen[0].session_id.as_str()),
        ("write_file", meta.id.as_str())
    );
    let written = std::fs::read_to_string(
        t.home
            .path()
            .join("sandboxes")
            .join(meta.id.as_str())
            .join("note.txt"),
    )
    .unwrap();
    assert_eq!(written, "안녕", "written in the parent's sandbox");
}

/// Holds calls of `list_dir` until the turn is aborted, telling the test
/// when one is waiting.
struct Hold(Arc<Notify>);

#[async_trait]
impl BeforeToolCall for Hold {
    fn name(&self) -> &str {
        "hold"
    }
    async fn before_tool_call(&self, call: &ToolCallInfo<'_>) -> GateDecision {
        if call.tool_name == "list_dir" {
            self.0.notify_one();
            std::future::pending::<()>().await;
        }
        GateDecision::Allow
    }
}

#[tokio::test]
async fn aborting_the_parent_cancels_its_subagents() {
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [
      { name: run_subagent, arguments: { name: researcher, task: "하나" } },
      { name: run_subagent, arguments: { name: researcher, task: "둘" } } ] }
  - when: { agent: main.researcher, last_role: user }
    reply: { tool_calls: [ { name: list_dir, arguments: { path: "." } } ] }
  - when: { agent: main.researcher, last_role: tool }
    reply: { text: "never reached" }
"#;
    let waiting = Arc::new(Notify::new());
    let t = app_with(script, MAIN_YAML, vec![Arc::new(Hold(waiting.clone()))]).await;
    let meta = t.app.default_session("main").await.unwrap();
    let session = t.app.session(&meta.id).await.unwrap();
    let screen = Arc::new(RecordingAdapter::new());
    let _s = session.attach(screen.clone());
    let turn = tokio::spawn({
        let session = session.clone();
        async move { session.prompt("둘 다", Caller::Local).await }
    });
    waiting.notified().await;
    assert!(session.abort());
    let out = tokio::time::timeout(Duration::from_secs(30), turn)
        .await
        .expect("the abort ended the turn")
        .unwrap()
        .unwrap();
    assert_eq!(out.final_message.stop_reason, StopReason::Aborted);
    let inner_ends: Vec<StopReason> = wrapped(&screen)
        .into_iter()
        .filter_map(|(_, _, e)| match e {
            AgentEvent::AgentEnd { final_message, .. } => Some(final_message.stop_reason),
            _ => None,
        })
        .collect();
    assert_eq!(
        inner_ends,
        [StopReason::Aborted, StopReason::Aborted],
        "both children ended aborted"
    );
    assert!(
        !t.faux
            .requests()
            .iter()
            .any(|r| r.metadata.agent_id == "main.researcher"
                && matches!(r.recorded_messages().last(), Some(Message::Tool(_)))),
        "no child went on after the abort"
    );
}

#[tokio::test]
async fn nesting_is_two_deep_and_a_tool_outside_the_list_is_refused() {
    let main_yaml = r#"
subagents:
  - name: lead
    tools: [list_dir, read_file]
    subagents:
      - { name: deep, tools: [list_dir] }
"#;
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: run_subagent, arguments: { name: lead, task: "깊이 가" } } ] }
  - when: { agent: main.lead, last_role: user }
    reply: { tool_calls: [ { name: run_subagent, arguments: { name: deep, task: "더 깊이" } } ] }
  - when: { agent: main.lead.deep, last_role: user }
    reply: { tool_calls: [
      { name: run_subagent, arguments: { name: deep, task: "한 번 더" } },
      { name: read_file, arguments: { path: "x.txt" } } ] }
  - when: { agent: main.lead.deep, last_role: tool }
    reply: { text: "deep 의 답" }
  - when: { agent: main.lead, last_role: tool }
    reply: { text: "lead 의 답" }
  - when: { agent: main, last_role: tool }
    reply: { text: "main 의 답" }
"#;
    let t = app_with(script, main_yaml, Vec::new()).await;
    let meta = t.app.default_session("main").await.unwrap();
    let session = t.app.session(&meta.id).await.unwrap();
    let screen = Arc::new(RecordingAdapter::new());
    let _s = session.attach(screen.clone());
    let out = session.prompt("시작", Caller::Local).await.unwrap();
    assert_eq!(out.final_message.content, "main 의 답");
    let deep = by_agent(&t.faux.requests(), "main.lead.deep");
    let results = tool_results(deep.last().unwrap());
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|(_, is_error, _)| *is_error), "{results:?}");
    assert!(results[0].2.contains("run_subagent"), "{results:?}");
    assert!(results[1].2.contains("read_file"), "{results:?}");
    // The deepest run's events carry the whole path, wrapped once.
    let paths: Vec<Vec<String>> = wrapped(&screen).into_iter().map(|(_, p, _)| p).collect();
    assert!(paths.contains(&vec!["main".to_owned(), "lead".to_owned(), "deep".to_owned()]));
    assert!(
        wrapped(&screen)
            .iter()
            .all(|(_, _, e)| !matches!(e, AgentEvent::SubagentEvent { .. })),
        "never wrapped twice"
    );
}

#[tokio::test]
async fn bad_subagent_definitions_are_refused_with_the_reason() {
    // A team definition whose sub-agent lists a tool its agent lacks is skipped.
    let home = tempfile::tempdir().unwrap();
    let config = AppConfig::embedded(home.path())
        .with_provider(Arc::new(
            FauxProvider::from_yaml("fallback: { text: ok }").unwrap(),
        ))
        .with_definition(
            "bob",
            "tools: [read_file]\nsubagents:\n  - { name: w, tools: [write_file] }\n",
        )
        .with_definition(
            "ann",
            "tools: [read_file]\nsubagents:\n  - { name: r, tools: [read_file] }\n",
        );
    let app = build_app(config).await.unwrap();
    let skipped = app.registry().skipped();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(skipped[0].reason.contains("write_file"), "{skipped:?}");
    let ann = app.registry().get("ann").unwrap();
    assert_eq!(ann.subagents[0].id, "ann.r");
    assert!(ann.has_tool("run_subagent"));
    // A main.yaml with keys it does not read still gives JARVIS its sub-agents.
    let t = app_with("fallback: { text: ok }", MAIN_YAML, Vec::new()).await;
    let main = t.app.registry().main();
    assert_eq!(
        main.subagents.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["researcher", "writer"]
    );
    assert_eq!(main.name, "J.A.R.V.I.S.", "name comes from JARVIS_BRAND__*");
    assert!(main.has_tool("run_subagent"));
}

/// A model that plays a generated tape: each call takes the next choice.
/// JARVIS answers, lists a folder, runs one sub-agent or two; a sub-agent
/// answers, lists a folder or answers empty; calls without tools
/// (summaries, wrap-ups) answer with text.
#[derive(Debug)]
struct Tape {
    choices: Vec<u8>,
    next: std::sync::atomic::AtomicUsize,
    calls: Mutex<Vec<String>>,
}

impl jarvis_sdk::model::Provider for Tape {
    fn stream(&self, request: ChatRequest) -> jarvis_sdk::model::ProviderStream {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let c = self.choices[i % self.choices.len()];
        self.calls.lock().unwrap().push(request.metadata.agent_id.clone());
        let list = || jarvis_sdk::model::FauxReply::tool_call("list_dir", serde_json::json!({"path": "."}));
        let run = || {
            jarvis_sdk::model::FauxReply::tool_call(
                "run_subagent",
                serde_json::json!({"name": "r", "task": "t"}),
            )
        };
        let reply = if request.tools.is_empty() {
            jarvis_sdk::model::FauxReply::text("summary")
        } else if request.metadata.agent_id == "main" {
            match c % 4 {
                0 => jarvis_sdk::model::FauxReply::text("done"),
                1 => list(),
                2 => run(),
                _ => run().and_tool_call("run_subagent", serde_json::json!({"name": "r", "task": "u"})),
            }
        } else {
            match c % 3 {
                0 => jarvis_sdk::model::FauxReply::text("found"),
                1 => list(),
                _ => jarvis_sdk::model::FauxReply::empty(),
            }
        };
        FauxProvider::new(jarvis_sdk::model::FauxScript::new().reply(reply))
            .unwrap()
            .stream(request)
    }

    fn name(&self) -> &str {
        "tape"
    }
}

#[test]
fn model_calls_stay_within_the_documented_bounds_and_every_start_has_its_end_at_every_depth() {
    use proptest::prelude::*;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 24,
        ..proptest::test_runner::Config::default()
    });
    let strategy = (proptest::collection::vec(any::<u8>(), 1..40), 1u32..4, 1u32..4);
    runner
        .run(&strategy, |(choices, main_turns, sub_turns)| {
            runtime.block_on(async {
                let tape = Arc::new(Tape {
                    choices,
                    next: Default::default(),
                    calls: Mutex::default(),
                });
                let home = tempfile::tempdir().unwrap();
                let mut config = AppConfig::embedded(home.path())
                    .with_provider(tape.clone())
                    .with_definition(
                        "main",
                        format!("subagents:\n  - {{ name: r, tools: [list_dir], max_turns: {sub_turns} }}\n"),
                    );
                config.loop_config.max_turns = main_turns;
                let app = build_app(config).await.unwrap();
                let meta = app.default_session("main").await.unwrap();
                let session = app.session(&meta.id).await.unwrap();
                let screen = Arc::new(RecordingAdapter::new());
                let _s = session.attach(screen.clone());
                session.prompt("go", Caller::Local).await.unwrap();

                let events = screen.events();
                let count = |kind: &str| events.iter().filter(|e| e.kind() == kind).count();
                prop_assert_eq!(count("agent_start"), 1);
                prop_assert_eq!(count("agent_end"), 1);
                // The tape's calls reuse ids step after step (each reply is
                // played by a fresh script), so a call id's runs follow one
                // another: each start is closed by its end before the next.
                let mut open: std::collections::BTreeMap<(String, Vec<String>), bool> = Default::default();
                let mut runs = 0u32;
                for (id, path, event) in wrapped(&screen) {
                    let running = open.entry((id, path.clone())).or_default();
                    match event.kind() {
                        "agent_start" => {
                            prop_assert!(!*running, "a second start before the end: {:?}", path);
                            *running = true;
                            runs += 1;
                        }
                        "agent_end" => {
                            prop_assert!(*running, "an end without its start: {:?}", path);
                            *running = false;
                        }
                        _ => {}
                    }
                }
                prop_assert!(open.values().all(|running| !running), "a run never ended");
                let bound = |max_turns: u32| 2 * (max_turns + (max_turns / 2).max(1)) + 2;
                let calls = tape.calls.lock().unwrap().clone();
                let main_calls = calls.iter().filter(|a| *a == "main").count() as u32;
                let sub_calls = calls.iter().filter(|a| *a == "main.r").count() as u32;
                prop_assert!(
                    main_calls <= bound(main_turns),
                    "{} > {}",
                    main_calls,
                    bound(main_turns)
                );
                prop_assert!(
                    sub_calls <= runs * bound(sub_turns),
                    "{} calls in {} runs",
                    sub_calls,
                    runs
                );
                Ok(())
            })
        })
        .unwrap();
}

#[tokio::test]
async fn main_yaml_sets_jarviss_tools_boundaries_and_budget_and_a_broken_one_changes_nothing() {
    let main_yaml = r#"
tools: [list_dir, read_file]
boundaries: { ask: [list_dir], never: [read_file] }
budget: { turn_tokens: 5000, day_usd: 2.5 }
model: ignored-with-a-warning
"#;
    let t = app_with("fallback: { text: ok }", main_yaml, Vec::new()).await;
    let main = t.app.registry().main();
    assert!(main.has_tool("list_dir") && main.has_tool("read_file"));
    assert!(
        !main.has_tool("write_file"),
        "tools: only the listed ones (and those every agent gets)"
    );
    assert_eq!(main.boundaries.ask, ["list_dir"]);
    assert_eq!(main.boundaries.never, ["read_file"]);
    assert_eq!(
        (main.budget.turn_tokens, main.budget.day_usd),
        (Some(5000), Some(2.5))
    );
    assert_ne!(
        main.model, "ignored-with-a-warning",
        "the model comes from JARVIS_LLM__*"
    );

    // A sub-agent with a tool JARVIS lacks: main.yaml is not applied at all.
    let broken = "tools: [list_dir]\nsubagents:\n  - { name: w, tools: [write_file] }\n";
    let t = app_with("fallback: { text: ok }", broken, Vec::new()).await;
    let main = t.app.registry().main();
    assert!(main.subagents.is_empty() && !main.has_tool("run_subagent"));
    assert!(main.has_tool("write_file"), "JARVIS keeps its default tools");
}
