//! The OpenAI-compatible provider against its wire transcripts.

use futures::StreamExt;
use jarvis_sdk::CancellationToken;
use jarvis_sdk::agent::{
    AgentEvent, AgentLoopConfig, LoopContext, ModelSettings, StopReason, ToolRegistry, ToolResult,
    run_agent_loop,
};
use jarvis_sdk::model::{
    ApiKey, ChatRequest, HttpSettings, Message, OpenAiConfig, OpenAiDecoder, OpenAiProvider, Provider,
    ProviderError, RetryPolicy, Usage,
};
use jarvis_sdk::testing::{FnTool, RecordingAdapter};
use std::sync::Arc;
use std::time::Duration;

use super::fixtures::{self, collect, decode};
use super::replay::{Ending, RecordingSleeper, Replay, Reply};

const SECRET: &str = "sk-test-SECRET-never-logged";

fn provider(url: &str, sleeper: Arc<RecordingSleeper>) -> OpenAiProvider {
    let mut config =
        OpenAiConfig::new(Some(ApiKey::new(SECRET)), "gpt-4o-mini").with_base_url(format!("{url}/v1"));
    config.http = HttpSettings {
        sleeper,
        ..HttpSettings::default()
    };
    OpenAiProvider::new(config).unwrap()
}

#[test]
fn every_transcript_decodes_to_its_snapshot() {
    fixtures::check_snapshots("openai", OpenAiDecoder::default);
}

#[test]
fn any_byte_split_decodes_the_same() {
    fixtures::check_random_splits("openai", OpenAiDecoder::default);
}

#[test]
fn every_byte_split_of_the_text_transcript_decodes_the_same() {
    fixtures::check_every_split("openai", "text", OpenAiDecoder::default);
    fixtures::check_every_split("openai", "tool_call", OpenAiDecoder::default);
}

#[tokio::test]
async fn over_http_every_transcript_gives_what_decoding_gives() {
    for f in fixtures::streamed("openai") {
        let expected = decode(OpenAiDecoder::default(), &[&f.body]);
        let replay = Replay::start(vec![f.clone().into()]).await;
        let p = provider(&replay.url, Arc::default());
        let got = collect(&p, ChatRequest::new("", vec![Message::user("hi")])).await;
        assert_eq!(got, expected, "{}", f.name);
        let requests = replay.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].path, "/v1/chat/completions");
        assert_eq!(requests[0].headers["authorization"], format!("Bearer {SECRET}"));
        assert_eq!(
            requests[0].body["model"], "gpt-4o-mini",
            "the provider's model when the request has none"
        );
    }
}

#[tokio::test]
async fn a_tool_loop_sends_well_formed_requests() {
    let replay = Replay::start(vec![
        fixtures::load("openai", "tool_call").into(),
        fixtures::load("openai", "text").into(),
    ])
    .await;
    let mut tools = ToolRegistry::new();
    tools
        .register(Arc::new(FnTool::new("sh_notice", |args| {
            Ok(ToolResult::ok(format!(
                "SH 공고 1건 ({})",
                args["region"].as_str().unwrap_or("?")
            )))
        })))
        .unwrap();
    let ctx = LoopContext::new(Arc::new(provider(&replay.url, Arc::default())))
        .with_tools(tools)
        .with_model(ModelSettings {
            model: "gpt-4o-mini-2024-07-18".into(),
            system_prompt: Some("You are J.A.R.V.I.S.".into()),
            temperature: Some(0.0),
            max_tokens: Some(512),
        });
    let outcome = run_agent_loop(
        &ctx,
        &AgentLoopConfig::default(),
        vec![Message::user("서울 SH 공고 하나만 찾아 줘")],
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(
        outcome.final_message.content,
        "안녕하세요, 주인님. How can I help? 😀"
    );
    assert_eq!(outcome.final_message.usage.input_tokens, 81 + 19);
    let bodies: Vec<serde_json::Value> = replay.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 2);
    // The system prompt is the first message; the tool result answers the call by id.
    assert_eq!(bodies[1]["messages"][0]["role"], "system");
    assert_eq!(
        bodies[1]["messages"][2]["tool_calls"][0]["id"],
        "call_DdmO9pD3xa9XTPNJ32zg2hcA"
    );
    assert_eq!(
        bodies[1]["messages"][3]["tool_call_id"],
        "call_DdmO9pD3xa9XTPNJ32zg2hcA"
    );
    insta::assert_snapshot!(
        "openai__loop_requests",
        serde_json::to_string_pretty(&bodies).unwrap()
    );
}

#[tokio::test]
async fn cached_prompt_tokens_reach_the_turns_usage_as_part_of_its_input() {
    let replay = Replay::start(vec![fixtures::load("openai", "cached_prompt").into()]).await;
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
        Usage::new(2006, 9).with_cached_input(1920),
        "prompt_tokens is the whole input; cached_tokens the part of it from the cache"
    );
}

#[tokio::test]
async fn a_429_is_retried_after_the_advertised_delay() {
    let replay = Replay::start(vec![
        fixtures::load("openai", "error_429").into(),
        fixtures::load("openai", "text").into(),
    ])
    .await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let p = provider(&replay.url, sleeper.clone());
    let got = collect(&p, ChatRequest::new("m", vec![Message::user("hi")])).await;
    assert!(got.contains("How can I help?"), "{got}");
    assert_eq!(*sleeper.waits.lock().unwrap(), [Duration::from_secs(2)]);
    assert_eq!(replay.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_are_retried_with_growing_backoff_then_surface() {
    let replay = Replay::start(
        (0..4)
            .map(|_| fixtures::load("openai", "error_500").into())
            .collect(),
    )
    .await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let p = provider(&replay.url, sleeper.clone());
    let got = collect(&p, ChatRequest::new("m", vec![Message::user("hi")])).await;
    assert_eq!(
        got,
        "error: openai api error (status 500): server_error: The server had an error while processing your request. Sorry about that!"
    );
    assert_eq!(replay.requests().len(), 4, "the first try and 3 retries");
    let waits = sleeper.waits.lock().unwrap().clone();
    let policy = RetryPolicy::default();
    assert_eq!(waits.len(), 3);
    for (n, wait) in waits.iter().enumerate() {
        let full = policy.initial_backoff * (1 << n);
        assert!(*wait >= full / 2 && *wait <= full, "retry {n}: {wait:?}");
    }
}

#[tokio::test]
async fn a_401_is_not_retried_and_the_key_never_shows() {
    let replay = Replay::start(vec![fixtures::load("openai", "error_401").into()]).await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let p = provider(&replay.url, sleeper.clone());
    let mut stream = p.stream(ChatRequest::new("m", vec![Message::user("hi")]));
    let error = stream.next().await.unwrap().unwrap_err();
    assert!(matches!(
        error,
        ProviderError::Api {
            status: Some(401),
            ..
        }
    ));
    assert!(
        error
            .to_string()
            .contains("invalid_request_error: Incorrect API key provided"),
        "{error}"
    );
    assert!(sleeper.waits.lock().unwrap().is_empty());
    assert_eq!(replay.requests().len(), 1);
    for shown in [format!("{p:?}"), format!("{error:?}"), error.to_string()] {
        assert!(!shown.contains(SECRET), "the key leaked: {shown}");
    }
}

#[tokio::test]
async fn a_failure_after_the_first_byte_is_not_retried_and_ends_the_turn() {
    let mut cut: Reply = fixtures::load("openai", "text").into();
    cut.body.truncate(400);
    let replay = Replay::start(vec![
        cut.ending(Ending::Abort),
        fixtures::load("openai", "text").into(),
    ])
    .await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let ui = Arc::new(RecordingAdapter::new());
    let ctx = LoopContext::new(Arc::new(provider(&replay.url, sleeper.clone()))).with_ui(ui.clone());
    let outcome = run_agent_loop(
        &ctx,
        &AgentLoopConfig::default(),
        vec![Message::user("hi")],
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.final_message.stop_reason, StopReason::Error);
    assert_eq!(replay.requests().len(), 1, "not retried once output began");
    assert!(sleeper.waits.lock().unwrap().is_empty());
    let errors: Vec<String> = ui
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::AgentError { message } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].starts_with("openai "), "{}", errors[0]);
}

#[tokio::test]
async fn cancelling_drops_the_stream_at_once() {
    let mut hang: Reply = fixtures::load("openai", "text").into();
    // Keep the first two events (the second carries text), then hang.
    let third = hang
        .body
        .windows(7)
        .enumerate()
        .filter(|(_, w)| *w == b"\n\ndata:")
        .nth(1)
        .unwrap()
        .0;
    hang.body.truncate(third + 2);
    let replay = Replay::start(vec![hang.ending(Ending::Hang)]).await;
    let ui = Arc::new(RecordingAdapter::breaking_on(|e| {
        matches!(e, AgentEvent::MessageUpdate { .. })
    }));
    let ctx = LoopContext::new(Arc::new(provider(&replay.url, Arc::default()))).with_ui(ui);
    let (config, cancel) = (AgentLoopConfig::default(), CancellationToken::new());
    let run = run_agent_loop(&ctx, &config, vec![Message::user("hi")], &cancel);
    // The server never finishes; only the abort can end the turn.
    let outcome = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("abort ends the call")
        .unwrap();
    assert_eq!(outcome.final_message.stop_reason, StopReason::Aborted);
}

#[tokio::test]
async fn an_unreachable_server_is_a_transport_error_after_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let sleeper = Arc::new(RecordingSleeper::default());
    let p = provider(&url, sleeper.clone());
    let got = collect(&p, ChatRequest::new("m", vec![Message::user("hi")])).await;
    assert!(
        got.starts_with("error: openai transport error: cannot connect"),
        "{got}"
    );
    assert_eq!(sleeper.waits.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_silent_server_hits_the_read_timeout() {
    let mut hang: Reply = fixtures::load("openai", "text").into();
    hang.body.truncate(100);
    let replay = Replay::start(vec![hang.ending(Ending::Hang)]).await;
    let mut config = OpenAiConfig::new(None, "m").with_base_url(format!("{}/v1", replay.url));
    config.http.read_timeout = Duration::from_millis(300);
    let p = OpenAiProvider::new(config).unwrap();
    let run = collect(&p, ChatRequest::new("m", vec![Message::user("hi")]));
    let got = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the read timeout fires");
    assert!(
        got.starts_with("error: openai transport error: the request timed out"),
        "{got}"
    );
    assert_eq!(replay.requests().len(), 1, "output had begun: no retry");
}
