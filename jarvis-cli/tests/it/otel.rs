//! The `jarvis` binary exports its GenAI spans over OTLP/HTTP when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, with message contents only when
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use std::sync::{Arc, Mutex};

use super::{TempHome, http_server, scripted, text};

/// Runs `jarvis ask` against a receiver and answers the spans it got.
fn ask_traced(capture: Option<&str>) -> Vec<Span> {
    let home = TempHome::new();
    let bodies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let kept = bodies.clone();
    let url = http_server(move |line, body| {
        if line.starts_with("POST /v1/traces") {
            kept.lock().unwrap().push(body.to_vec());
        }
        ("application/x-protobuf", String::new())
    });
    let mut cmd = scripted(&home, "replies: [ { text: \"네, 주인님.\" } ]\n");
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &url)
        .env_remove("OTEL_TRACES_EXPORTER");
    match capture {
        Some(value) => cmd.env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value),
        None => cmd.env_remove("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"),
    };
    let out = cmd.args(["ask", "오늘 일정 알려 줘"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "네, 주인님.");
    // The process sent its spans before it exited.
    let bodies = bodies.lock().unwrap();
    bodies
        .iter()
        .flat_map(|b| {
            ExportTraceServiceRequest::decode(b.as_slice())
                .expect("OTLP protobuf")
                .resource_spans
        })
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect()
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    let value = span.attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match value.value.as_ref()? {
        Value::StringValue(s) => Some(s),
        _ => None,
    }
}

#[test]
fn the_binary_exports_genai_spans_and_contents_only_when_asked() {
    let spans = ask_traced(Some("true"));
    let op = |s: &&Span| attr(s, "gen_ai.operation.name").map(str::to_owned);
    let turn = spans
        .iter()
        .find(|s| op(s).as_deref() == Some("invoke_agent"))
        .expect("a turn span");
    let chat = spans
        .iter()
        .find(|s| op(s).as_deref() == Some("chat"))
        .expect("a chat span");
    assert_eq!(
        chat.parent_span_id, turn.span_id,
        "the model call is part of the turn"
    );
    assert_eq!(attr(chat, "gen_ai.provider.name"), Some("faux"));
    assert!(attr(chat, "gen_ai.input.messages").is_some_and(|m| m.contains("오늘 일정 알려 줘")));
    assert!(attr(chat, "gen_ai.output.messages").is_some_and(|m| m.contains("네, 주인님.")));

    let spans = ask_traced(None);
    let chat = spans
        .iter()
        .find(|s| attr(s, "gen_ai.operation.name") == Some("chat"))
        .expect("a chat span without contents");
    assert_eq!(attr(chat, "gen_ai.input.messages"), None);
    assert_eq!(attr(chat, "gen_ai.output.messages"), None);
}
