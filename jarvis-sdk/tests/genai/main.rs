//! GenAI spans exported over OTLP/HTTP to a receiver in the test: a turn
//! of JARVIS that calls a tool, delegates to KAREN and runs a sub-agent,
//! on FauxProvider. The receiver decodes what the exporter sends
//! (protobuf, as a collector would) and the test checks the span tree by
//! parent links and the GenAI attributes, never the display names.
//!
//! A test binary of its own: each test sets its subscriber for its thread
//! only, and `tracing` caches per call site whether anyone listens; the
//! suite's hundreds of other tests, setting and dropping their own
//! subscribers at the same time, made that cache miss spans here now and
//! then.

use jarvis_sdk::app::{AppConfig, build_app, otel_layer};
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::turn::Caller;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tracing_subscriber::layer::SubscriberExt;

const MAIN_YAML: &str = r#"
subagents:
  - name: researcher
    description: "Lists files"
    instructions: "You list the files."
    tools: [list_dir]
    max_turns: 4
"#;

const KAREN_YAML: &str = "name: KAREN\ndescription: 대출 계산\n";

const SCRIPT: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [
      { name: ask_agent, arguments: { agent: karen, request: "이자 계산해 줘" } },
      { name: run_subagent, arguments: { name: researcher, task: "목록" } } ] }
  - when: { agent: karen, last_role: user }
    reply: { text: "월 이자는 10만 원입니다" }
  - when: { agent: main.researcher, last_role: user }
    reply: { tool_calls: [ { name: list_dir, arguments: { path: "." } } ] }
  - when: { agent: main.researcher, last_role: tool }
    reply: { text: "빈 폴더" }
  - when: { agent: main, last_role: tool }
    reply: { text: "끝났어요" }
"#;

/// An OTLP/HTTP traces endpoint on its own thread and runtime (the
/// exporter's flush blocks the test's thread while it answers).
fn receiver() -> (String, Arc<Mutex<Vec<Span>>>) {
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let kept = spans.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let app = axum::Router::new().route(
                "/v1/traces",
                axum::routing::post(move |body: axum::body::Bytes| {
                    let kept = kept.clone();
                    async move {
                        let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
                        let mut kept = kept.lock().unwrap();
                        for resource in request.resource_spans {
                            for scope in resource.scope_spans {
                                kept.extend(scope.spans);
                            }
                        }
                        ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    let addr = rx.recv().unwrap();
    (format!("http://{addr}/v1/traces"), spans)
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    match attr(span, key)? {
        Value::StringValue(s) => Some(s),
        _ => None,
    }
}

fn int(span: &Span, key: &str) -> Option<i64> {
    match attr(span, key)? {
        Value::IntValue(n) => Some(*n),
        _ => None,
    }
}

fn operation(span: &Span) -> &str {
    text(span, "gen_ai.operation.name").unwrap_or("")
}

#[tokio::test]
async fn a_turn_exports_its_genai_span_tree_over_otlp() {
    let (url, received) = receiver();
    let (layer, guard) = otel_layer(&url).unwrap();
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));

    let home = tempfile::tempdir().unwrap();
    let faux = Arc::new(FauxProvider::from_yaml(SCRIPT).unwrap());
    let config = AppConfig::embedded(home.path())
        .with_provider(faux)
        .with_definition("main", MAIN_YAML)
        .with_definition("karen", KAREN_YAML);
    let app = build_app(config).await.unwrap();
    let session = app
        .session(&app.default_session("main").await.unwrap().id)
        .await
        .unwrap();
    let outcome = session
        .prompt("KAREN 한테 이자 물어보고 목록도 봐 줘", Caller::Local)
        .await
        .unwrap();
    assert_eq!(outcome.final_message.content, "끝났어요");
    drop(session);
    // The turn's span ends when its task lets go of it.
    let spans = until_span(&guard, &received, "gen_ai.agent.id", "main").await;
    let by_id: HashMap<&[u8], &Span> = spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let parent = |s: &Span| by_id.get(s.parent_span_id.as_slice()).copied();
    let turn = spans
        .iter()
        .find(|s| operation(s) == "invoke_agent" && text(s, "gen_ai.agent.id") == Some("main"))
        .unwrap_or_else(|| panic!("JARVIS's turn span: {spans:#?}"));
    assert!(turn.parent_span_id.is_empty(), "a person's turn is a root span");
    assert_eq!(text(turn, "gen_ai.conversation.id"), Some("default-main"));
    assert!(int(turn, "gen_ai.usage.input_tokens").unwrap_or_else(|| panic!("{turn:#?}")) > 0);
    assert!(int(turn, "gen_ai.usage.output_tokens").unwrap() > 0);
    let children = |of: &Span| -> Vec<&Span> {
        spans
            .iter()
            .filter(|s| parent(s).is_some_and(|p| p.span_id == of.span_id))
            .collect()
    };

    // The turn: its security stages, two model calls, two tool calls.
    let direct = children(turn);
    let count = |op: &str| direct.iter().filter(|s| operation(s) == op).count();
    assert_eq!((count("chat"), count("execute_tool")), (2, 2), "{direct:#?}");
    let stages: Vec<&str> = direct
        .iter()
        .filter_map(|s| text(s, "jarvis.security.stage"))
        .collect();
    assert_eq!(stages.len(), 3, "validation, auth and policy: {stages:?}");
    for chat in direct.iter().filter(|s| operation(s) == "chat") {
        assert_eq!(text(chat, "gen_ai.provider.name"), Some("faux"));
        assert_eq!(text(chat, "gen_ai.system"), Some("faux"));
        assert!(text(chat, "gen_ai.request.model").is_some());
        assert!(int(chat, "gen_ai.usage.input_tokens").unwrap() > 0);
        assert!(int(chat, "gen_ai.usage.output_tokens").unwrap() > 0);
        let reasons = text(chat, "gen_ai.response.finish_reasons").unwrap();
        assert!(
            reasons == r#"["tool_calls"]"# || reasons == r#"["stop"]"#,
            "{reasons}"
        );
        assert!(
            attr(chat, "gen_ai.input.messages").is_none(),
            "no contents unless asked"
        );
    }
    let tool = |name: &str| {
        *direct
            .iter()
            .find(|s| operation(s) == "execute_tool" && text(s, "gen_ai.tool.name") == Some(name))
            .unwrap_or_else(|| panic!("execute_tool {name}: {direct:#?}"))
    };
    let (ask, sub) = (tool("ask_agent"), tool("run_subagent"));
    assert!(text(ask, "gen_ai.tool.call.id").is_some_and(|id| !id.is_empty()));

    // The delegation: KAREN's turn is a child of the ask_agent call, with
    // her own model call under it.
    let karen = children(ask)
        .into_iter()
        .find(|s| operation(s) == "invoke_agent")
        .unwrap_or_else(|| panic!("KAREN's turn under ask_agent: {spans:#?}"));
    assert_eq!(text(karen, "gen_ai.agent.id"), Some("karen"));
    assert_eq!(
        children(karen).iter().filter(|s| operation(s) == "chat").count(),
        1
    );

    // The sub-agent's run is a child of run_subagent, and its own tool
    // call a child of that run.
    let researcher = children(sub)
        .into_iter()
        .find(|s| operation(s) == "invoke_agent")
        .unwrap_or_else(|| panic!("the sub-agent's run under run_subagent: {spans:#?}"));
    assert_eq!(text(researcher, "gen_ai.agent.id"), Some("main.researcher"));
    let inner = children(researcher);
    assert_eq!(inner.iter().filter(|s| operation(s) == "chat").count(), 2);
    assert!(
        inner
            .iter()
            .any(|s| operation(s) == "execute_tool" && text(s, "gen_ai.tool.name") == Some("list_dir"))
    );
    // One trace.
    assert!(
        spans
            .iter()
            .filter(|s| !operation(s).is_empty())
            .all(|s| s.trace_id == turn.trace_id)
    );
}

/// Flushes `guard` until a span whose `key` is `value` arrives; answers
/// every span received.
async fn until_span(
    guard: &jarvis_sdk::app::OtelGuard,
    received: &Mutex<Vec<Span>>,
    key: &str,
    value: &str,
) -> Vec<Span> {
    for _ in 0..100 {
        guard.flush().unwrap();
        if received
            .lock()
            .unwrap()
            .iter()
            .any(|s| text(s, key) == Some(value))
        {
            break;
        }
        tokio::task::yield_now().await;
    }
    received.lock().unwrap().clone()
}

#[tokio::test]
async fn a_refused_input_marks_its_turn_and_a_bare_harness_turn_has_one() {
    use jarvis_sdk::CancellationToken;
    use jarvis_sdk::agent::{
        AgentIdentity, Harness, LoopContext, MemorySessionStore, NewSession, SessionId, SessionStore,
    };

    let (url, received) = receiver();
    let (layer, guard) = otel_layer(&url).unwrap();
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));

    // The security pipeline refuses: the turn's span says why.
    let home = tempfile::tempdir().unwrap();
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: 네 }").unwrap());
    let app = build_app(AppConfig::embedded(home.path()).with_provider(faux.clone()))
        .await
        .unwrap();
    let session = app
        .session(&app.default_session("main").await.unwrap().id)
        .await
        .unwrap();
    assert!(
        session
            .prompt("<script>alert(1)</script>", Caller::Local)
            .await
            .is_err()
    );
    let spans = until_span(&guard, &received, "error.type", "security_rejected").await;
    let refused = spans
        .iter()
        .find(|s| operation(s) == "invoke_agent" && text(s, "error.type") == Some("security_rejected"))
        .unwrap_or_else(|| panic!("the refused turn's span: {spans:#?}"));
    assert!(
        spans
            .iter()
            .all(|s| operation(s) != "chat" || s.trace_id != refused.trace_id),
        "a refused input never reaches the model"
    );

    // A turn run by a Harness alone (no AgentSession) is a turn span too,
    // with its model call under it, and only one.
    let store = Arc::new(MemorySessionStore::new());
    let id = SessionId::new("bare").unwrap();
    store.create(NewSession::user(id.clone(), "solo")).await.unwrap();
    let ctx = LoopContext::new(faux).with_identity(AgentIdentity {
        agent_id: "solo".into(),
        agent_name: "SOLO".into(),
        session_id: "bare".into(),
    });
    let harness = Harness::new(store, ctx);
    harness
        .run_turn(&id, "안녕", &CancellationToken::new())
        .await
        .unwrap();
    let spans = until_span(&guard, &received, "gen_ai.agent.id", "solo").await;
    let turns: Vec<&Span> = spans
        .iter()
        .filter(|s| operation(s) == "invoke_agent" && text(s, "gen_ai.agent.id") == Some("solo"))
        .collect();
    assert_eq!(turns.len(), 1, "{spans:#?}");
    let turn = turns[0];
    assert_eq!(text(turn, "gen_ai.conversation.id"), Some("bare"));
    assert!(int(turn, "gen_ai.usage.output_tokens").is_some_and(|n| n > 0));
    let chats = spans
        .iter()
        .filter(|s| operation(s) == "chat" && s.parent_span_id == turn.span_id)
        .count();
    assert_eq!(chats, 1);
}
