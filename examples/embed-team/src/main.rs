//! Embeds a team of two agents defined by YAML strings, and runs one
//! delegation: JARVIS asks ADA, ADA uses her own tool, JARVIS relays the
//! answer. ADA's loan tool comes from the housing pack, added in one line.
//! A scripted model makes it run offline; every event of both sessions is
//! printed.
//!
//! Run with `cargo run -p example-embed-team`.

use jarvis_pack_housing::HousingPack;
use jarvis_sdk::agent::{AgentEvent, MessageDelta, UIAdapter};
use jarvis_sdk::app::{AppConfig, build_app};
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::turn::Caller;
use std::ops::ControlFlow;
use std::sync::Arc;

/// ADA's definition, as a team file would hold it.
const ADA: &str = r##"
name: A.D.A.
description: 대출 계산 담당 (loan maths)
quote: Numbers first
palette: { primary: "#c792ea", accent: "#ffd166" }
system_prompt: You are A.D.A. You compute loans with housing_loan and answer from its result only.
tools: [housing_loan]
"##;

/// What the model says, by agent and by the last message it sees.
const SCRIPT: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: ada, request: "1억 원, 연 4%, 30년 원리금균등 월 상환액은?" } } ] }
  - when: { agent: ada, last_role: user }
    reply: { tool_calls: [ { name: housing_loan, arguments: { principal: 100000000, annual_rate_percent: 4, years: 30, method: equal_payment } } ] }
  - when: { agent: ada, last_role: tool }
    reply: { text: "월 477,415원입니다 (원리금균등, 30년).", chunks: 3 }
  - when: { agent: main, last_role: tool }
    reply: { text: "A.D.A. 의 계산으로는 매달 477,415원입니다.", chunks: 4 }
"#;

/// Prints one session's events with a prefix.
struct Printer(&'static str);

impl UIAdapter for Printer {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        let who = self.0;
        match event {
            AgentEvent::MessageUpdate {
                delta: MessageDelta::TextDelta(text),
            } => println!("[{who}] text: {text}"),
            AgentEvent::ToolExecutionStart { tool_name, args, .. } => {
                println!("[{who}] → {tool_name} {args}")
            }
            AgentEvent::ToolExecutionEnd {
                tool_name, result, ..
            } => {
                let first = result.lines().next().unwrap_or_default();
                println!("[{who}] ← {tool_name}: {first}");
            }
            other => println!("[{who}] {}", other.kind()),
        }
        ControlFlow::Continue(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let home = std::env::temp_dir().join(format!("example-embed-team-{}", std::process::id()));
    let config = AppConfig::embedded(&home)
        .with_pack(Arc::new(HousingPack::in_memory()))
        .with_definition("ada", ADA)
        .with_provider(Arc::new(FauxProvider::from_yaml(SCRIPT)?));
    let app = build_app(config).await?;
    println!("team: {:?}", app.registry().ids().collect::<Vec<_>>());

    let session = app.session(&app.create_session(None).await?.id).await?;
    let _jarvis_screen = session.attach(Arc::new(Printer("JARVIS")));
    // Watch the peer session too: that is where ADA works.
    let peer = app.open_or_create(&"peer-main-ada".parse()?, Some("ada")).await?;
    let _ada_screen = peer.attach(Arc::new(Printer("ADA")));

    let outcome = session
        .prompt("ADA 에게 대출 계산을 맡겨 줘", Caller::Local)
        .await?;
    println!("answer: {}", outcome.final_message.content);
    anyhow::ensure!(outcome.final_message.content.contains("477,415"));
    drop(app);
    let _ = std::fs::remove_dir_all(&home);
    Ok(())
}
