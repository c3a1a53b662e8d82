//! The Ollama provider against its wire transcripts.

use jarvis_sdk::CancellationToken;
use jarvis_sdk::agent::{
    AgentLoopConfig, LoopContext, ModelSettings, ToolRegistry, ToolResult, run_agent_loop,
};
use jarvis_sdk::common::SequentialIds;
use jarvis_sdk::model::{ChatRequest, HttpSettings, Message, OllamaConfig, OllamaDecoder, OllamaProvider};
use jarvis_sdk::testing::FnTool;
use std::sync::Arc;

use super::fixtures::{self, collect, decode};
use super::replay::{RecordingSleeper, Replay};

fn decoder() -> OllamaDecoder {
    OllamaDecoder::new(Arc::new(SequentialIds::default()))
}

fn provider(url: &str, sleeper: Arc<RecordingSleeper>) -> OllamaProvider {
    let mut config = OllamaConfig::new("gemma4:e4b").with_base_url(url);
    config.http = HttpSettings {
        sleeper,
        ..HttpSettings::default()
    };
    config.ids = Arc::new(SequentialIds::default());
    OllamaProvider::new(config).unwrap()
}

#[test]
fn every_transcript_decodes_to_its_snapshot() {
    fixtures::check_snapshots("ollama", decoder);
}

#[test]
fn any_byte_split_decodes_the_same() {
    fixtures::check_random_splits("ollama", decoder);
}

#[test]
fn every_byte_split_of_two_transcripts_decodes_the_same() {
    fixtures::check_every_split("ollama", "text", decoder);
    fixtures::check_every_split("ollama", "unicode_escapes", decoder);
}

#[tokio::test]
async fn over_http_every_transcript_gives_what_decoding_gives() {
    for f in fixtures::streamed("ollama") {
        let expected = decode(decoder(), &[&f.body]);
        let replay = Replay::start(vec![f.clone().into()]).await;
        let got = collect(
            &provider(&replay.url, Arc::default()),
            ChatRequest::new("", vec![Message::user("hi")]),
        )
        .await;
        assert_eq!(got, expected, "{}", f.name);
        let r = &replay.requests()[0];
        assert_eq!(r.path, "/api/chat");
        assert_eq!(r.body["model"], "gemma4:e4b");
        assert_eq!(r.body["stream"], true);
    }
}

#[tokio::test]
async fn a_tool_loop_sends_well_formed_requests() {
    let replay = Replay::start(vec![
        fixtures::load("ollama", "tool_call").into(),
        fixtures::load("ollama", "text").into(),
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
            model: String::new(),
            system_prompt: Some("You are K.A.R.E.N.".into()),
            temperature: Some(0.0),
            max_tokens: Some(256),
        });
    let outcome = run_agent_loop(
        &ctx,
        &AgentLoopConfig::default(),
        vec![Message::user("서울 SH 공고 하나만")],
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(
        outcome.final_message.content,
        "청약 공고는 LH와 SH에서 확인할 수 있어요. 🏠"
    );
    assert_eq!(outcome.final_message.usage.input_tokens, 52);
    let Message::Assistant(call) = &outcome.new_messages[0] else {
        panic!()
    };
    assert_eq!(
        call.tool_calls[0].id, "call_1",
        "Ollama sends no id; the provider gives one"
    );
    let bodies: Vec<serde_json::Value> = replay.requests().into_iter().map(|r| r.body).collect();
    let tool_message = &bodies[1]["messages"][3];
    assert_eq!(tool_message["role"], "tool");
    assert_eq!(tool_message["tool_name"], "sh_notice");
    assert_eq!(
        bodies[1]["messages"][2]["tool_calls"][0]["function"]["arguments"]["region"],
        "서울"
    );
    assert_eq!(bodies[1]["options"]["num_predict"], 256);
    insta::assert_snapshot!(
        "ollama__loop_requests",
        serde_json::to_string_pretty(&bodies).unwrap()
    );
}

#[tokio::test]
async fn errors_carry_the_servers_message() {
    let replay = Replay::start(vec![fixtures::load("ollama", "error_404").into()]).await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let got = collect(
        &provider(&replay.url, sleeper.clone()),
        ChatRequest::new("m", vec![Message::user("x")]),
    )
    .await;
    assert_eq!(
        got,
        "error: ollama api error (status 404): model \"gemma4:e4b\" not found, try pulling it first"
    );
    assert!(
        sleeper.waits.lock().unwrap().is_empty(),
        "a missing model is not retried"
    );

    let replay = Replay::start(vec![
        fixtures::load("ollama", "error_500").into(),
        fixtures::load("ollama", "text").into(),
    ])
    .await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let got = collect(
        &provider(&replay.url, sleeper.clone()),
        ChatRequest::new("m", vec![Message::user("x")]),
    )
    .await;
    assert!(
        got.contains("확인할 수 있어요"),
        "a crashed runner is retried: {got}"
    );
    assert_eq!(sleeper.waits.lock().unwrap().len(), 1);
}
