//! The Anthropic provider against its wire transcripts.

use jarvis_sdk::CancellationToken;
use jarvis_sdk::agent::{
    AgentLoopConfig, LoopContext, ModelSettings, StopReason, ToolRegistry, ToolResult, run_agent_loop,
};
use jarvis_sdk::model::{
    AnthropicConfig, AnthropicDecoder, AnthropicProvider, ApiKey, ChatRequest, HttpSettings, Message,
    Purpose, Usage,
};
use jarvis_sdk::testing::{FnTool, RecordingAdapter};
use std::sync::Arc;
use std::time::Duration;

use super::fixtures::{self, collect, decode};
use super::replay::{RecordingSleeper, Replay};

const SECRET: &str = "sk-ant-SECRET-never-logged";

fn provider(url: &str, sleeper: Arc<RecordingSleeper>) -> AnthropicProvider {
    let mut config = AnthropicConfig::new(ApiKey::new(SECRET), "claude-sonnet-4-5").with_base_url(url);
    config.http = HttpSettings {
        sleeper,
        ..HttpSettings::default()
    };
    AnthropicProvider::new(config).unwrap()
}

#[test]
fn every_transcript_decodes_to_its_snapshot() {
    fixtures::check_snapshots("anthropic", AnthropicDecoder::default);
}

#[test]
fn any_byte_split_decodes_the_same() {
    fixtures::check_random_splits("anthropic", AnthropicDecoder::default);
}

#[test]
fn every_byte_split_of_two_transcripts_decodes_the_same() {
    fixtures::check_every_split("anthropic", "thinking", AnthropicDecoder::default);
    fixtures::check_every_split("anthropic", "tool_use", AnthropicDecoder::default);
}

#[tokio::test]
async fn over_http_every_transcript_gives_what_decoding_gives() {
    for f in fixtures::streamed("anthropic") {
        let expected = decode(AnthropicDecoder::default(), &[&f.body]);
        let replay = Replay::start(vec![f.clone().into()]).await;
        let p = provider(&replay.url, Arc::default());
        let got = collect(&p, ChatRequest::new("", vec![Message::user("hi")])).await;
        assert_eq!(got, expected, "{}", f.name);
        let r = &replay.requests()[0];
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.headers["x-api-key"], SECRET);
        assert_eq!(r.headers["anthropic-version"], "2023-06-01");
        assert_eq!(r.body["model"], "claude-sonnet-4-5");
        assert_eq!(r.body["max_tokens"], 4096, "the API requires max_tokens");
    }
}

fn sh_tools() -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools
        .register(Arc::new(FnTool::new("sh_notice", |args| {
            Ok(ToolResult::ok(format!(
                "SH 공고 1건 ({})",
                args["region"].as_str().unwrap_or("?")
            )))
        })))
        .unwrap();
    tools
        .register(Arc::new(FnTool::new("housing_loan", |_| {
            Ok(ToolResult::error("principal must be positive"))
        })))
        .unwrap();
    tools
}

#[tokio::test]
async fn a_tool_loop_sends_well_formed_requests() {
    let replay = Replay::start(vec![
        fixtures::load("anthropic", "thinking").into(),
        fixtures::load("anthropic", "tool_use").into(),
        fixtures::load("anthropic", "text").into(),
    ])
    .await;
    let ctx = LoopContext::new(Arc::new(provider(&replay.url, Arc::default())))
        .with_tools(sh_tools())
        .with_model(ModelSettings {
            model: String::new(),
            system_prompt: Some("당신은 K.A.R.E.N. 입니다.".into()),
            temperature: Some(0.2),
            max_tokens: None,
        });
    let history = vec![
        Message::user("대출 계산해 줘"),
        Message::assistant_text("먼저 조건을 알려 주세요."),
        Message::user("서울 SH 공고 하나만 찾아 줘"),
    ];
    let (config, cancel) = (AgentLoopConfig::default(), CancellationToken::new());
    // First turn: a thinking answer (recorded with its signature).
    let first = run_agent_loop(&ctx, &config, history.clone(), &cancel)
        .await
        .unwrap();
    assert_eq!(first.final_message.content, "월 상환액은 약 477,415원입니다.");
    // Second turn: a tool call, its result, the answer.
    let mut history = history;
    history.extend(first.new_messages);
    history.push(Message::user("이번엔 공고"));
    let second = run_agent_loop(&ctx, &config, history, &cancel).await.unwrap();
    assert_eq!(second.final_message.content, "서울 SH 공고 1건을 찾았습니다. ✅");
    assert_eq!(second.final_message.usage.input_tokens, 472 * 2);
    let bodies: Vec<serde_json::Value> = replay.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 3);
    let last = &bodies[2];
    assert_eq!(
        last["system"], "당신은 K.A.R.E.N. 입니다.",
        "the system prompt has its own field"
    );
    let messages = last["messages"].as_array().unwrap();
    assert!(messages.iter().all(|m| m["role"] != "system"));
    let result = &messages.last().unwrap()["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
    assert_eq!(result["is_error"], false);
    insta::assert_snapshot!(
        "anthropic__loop_requests",
        serde_json::to_string_pretty(&bodies).unwrap()
    );
}

#[tokio::test]
async fn thinking_round_trips_with_its_signature_when_enabled() {
    let replay = Replay::start(vec![fixtures::load("anthropic", "redacted_thinking").into()]).await;
    let mut config =
        AnthropicConfig::new(ApiKey::new(SECRET), "claude-sonnet-4-5").with_base_url(&replay.url);
    config.thinking_budget = Some(2048);
    let p = AnthropicProvider::new(config).unwrap();
    let ctx = LoopContext::new(Arc::new(p));
    let outcome = run_agent_loop(
        &ctx,
        &AgentLoopConfig::default(),
        vec![Message::user("hi")],
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    let Message::Assistant(answer) = &outcome.new_messages[0] else {
        panic!()
    };
    assert_eq!(answer.thinking.len(), 2);
    assert!(answer.thinking[0].redacted.is_some());
    assert_eq!(answer.thinking[1].signature.as_deref(), Some("sig-2"));
    // Sent back, the blocks come first, verbatim.
    let provider = AnthropicProvider::new(AnthropicConfig {
        thinking_budget: Some(2048),
        ..AnthropicConfig::new(ApiKey::new(SECRET), "m")
    })
    .unwrap();
    let body = provider.request_body(&ChatRequest::new(
        "m",
        vec![
            Message::user("hi"),
            outcome.new_messages[0].clone(),
            Message::user("more"),
        ],
    ));
    let blocks = &body["messages"][1]["content"];
    assert_eq!(blocks[0]["type"], "redacted_thinking");
    assert_eq!(
        blocks[1],
        serde_json::json!({"type": "thinking", "thinking": "Answer briefly.", "signature": "sig-2"})
    );
    assert_eq!(blocks[2], serde_json::json!({"type": "text", "text": "Done."}));
    assert_eq!(body["thinking"]["budget_tokens"], 2048);
    assert!(body.get("temperature").is_none());
}

#[tokio::test]
async fn the_overflow_summary_succeeds_with_tool_records_in_the_history() {
    let replay = Replay::start(vec![
        fixtures::load("anthropic", "tool_use").into(),
        fixtures::load("anthropic", "summary_text").into(),
        fixtures::load("anthropic", "text").into(),
    ])
    .await;
    let ui = Arc::new(RecordingAdapter::new());
    let ctx = LoopContext::new(Arc::new(provider(&replay.url, Arc::default())))
        .with_tools(sh_tools())
        .with_ui(ui);
    let config = AgentLoopConfig {
        max_turns: 1,
        ..AgentLoopConfig::default()
    };
    let outcome = run_agent_loop(
        &ctx,
        &config,
        vec![Message::user("공고 찾아 줘")],
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.overflows, 1);
    assert_eq!(outcome.summary_calls, 1);
    assert_eq!(outcome.final_message.content, "서울 SH 공고 1건을 찾았습니다. ✅");
    let bodies: Vec<serde_json::Value> = replay.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 3);
    let summary = &bodies[1];
    assert!(summary.get("tools").is_none(), "the summary call offers no tools");
    let text = summary.to_string();
    assert!(
        !text.contains("tool_use") && !text.contains("tool_result"),
        "tool blocks need tool definitions: {text}"
    );
    assert!(text.contains("[tool call] sh_notice"), "{text}");
    assert!(
        text.contains("[tool result] sh_notice: SH 공고 1건 (서울)"),
        "{text}"
    );
    // The continuation carries the model's summary, not the fallback built from tool names.
    let continuation = bodies[2]["messages"].to_string();
    assert!(continuation.contains("지금까지의 답: 공고 1건"), "{continuation}");
    assert!(
        !continuation.contains("기본 정리"),
        "the fallback summary was used"
    );
    insta::assert_snapshot!(
        "anthropic__summary_request",
        serde_json::to_string_pretty(summary).unwrap()
    );
}

#[tokio::test]
async fn cache_reads_count_as_cached_input_and_every_cache_token_as_input() {
    let replay = Replay::start(vec![fixtures::load("anthropic", "cached_prompt").into()]).await;
    let ctx = LoopContext::new(Arc::new(provider(&replay.url, Arc::default())));
    let outcome = run_agent_loop(
        &ctx,
        &AgentLoopConfig::default(),
        vec![Message::user("또 왔어")],
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.final_message.content, "다시 오셨네요, 주인님.");
    assert_eq!(
        outcome.final_message.usage,
        Usage::new(12 + 200 + 1800, 9).with_cached_input(1800),
        "input sums input, cache writes and cache reads; the reads are the cached part"
    );
}

#[tokio::test]
async fn rate_limits_and_overload_are_retried() {
    let replay = Replay::start(vec![
        fixtures::load("anthropic", "error_429").into(),
        fixtures::load("anthropic", "error_529").into(),
        fixtures::load("anthropic", "text").into(),
    ])
    .await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let p = provider(&replay.url, sleeper.clone());
    let got = collect(&p, ChatRequest::new("m", vec![Message::user("hi")])).await;
    assert!(got.contains("1건을 찾았습니다"), "{got}");
    let waits = sleeper.waits.lock().unwrap().clone();
    assert_eq!(waits.len(), 2);
    assert_eq!(waits[0], Duration::from_secs(3), "retry-after honoured");
    assert_eq!(replay.requests().len(), 3);
}

#[tokio::test]
async fn errors_name_their_type_and_hide_the_key() {
    for (name, status, text, retries) in [
        (
            "error_401",
            401,
            "anthropic api error (status 401): authentication_error: invalid x-api-key",
            0,
        ),
        (
            "error_500",
            500,
            "anthropic api error (status 500): api_error: Internal server error",
            3,
        ),
    ] {
        let replay = Replay::start((0..4).map(|_| fixtures::load("anthropic", name).into()).collect()).await;
        let sleeper = Arc::new(RecordingSleeper::default());
        let p = provider(&replay.url, sleeper.clone());
        let got = collect(&p, ChatRequest::new("m", vec![Message::user("hi")])).await;
        assert_eq!(got, format!("error: {text}"), "{name} ({status})");
        assert_eq!(sleeper.waits.lock().unwrap().len(), retries, "{name}");
        assert!(!format!("{p:?}").contains(SECRET));
    }
    // An error event inside a 200 stream is not retried (output may have begun).
    let replay = Replay::start(vec![fixtures::load("anthropic", "overloaded_in_stream").into()]).await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let ctx = LoopContext::new(Arc::new(provider(&replay.url, sleeper.clone())));
    let outcome = run_agent_loop(
        &ctx,
        &AgentLoopConfig::default(),
        vec![Message::user("hi")],
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.final_message.stop_reason, StopReason::Error);
    assert!(
        outcome
            .error
            .unwrap()
            .to_string()
            .contains("overloaded_error: Overloaded")
    );
    assert!(sleeper.waits.lock().unwrap().is_empty());
}

#[test]
fn consecutive_same_role_messages_merge_into_one_turn() {
    let p = AnthropicProvider::new(AnthropicConfig::new(ApiKey::new("k"), "m")).unwrap();
    let request = ChatRequest::new("m", vec![Message::user("a"), Message::user("b")])
        .with_purpose(Purpose::Nudge)
        .with_instruction("c");
    let body = p.request_body(&request);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(
        messages[0]["content"].as_array().unwrap().len(),
        3,
        "two user texts and the instruction"
    );
}
