//! Replaces the policy slot of the security pipeline with a stage that
//! refuses card numbers, keeping the standard rule (peer sessions are
//! read-only for people) by running it first. The pipeline's order —
//! validation → auth → policy — stays fixed whatever sits in the slots.
//!
//! Run with `cargo run -p example-custom-security-stage`.

use jarvis_sdk::app::{AppConfig, build_app};
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::turn::{Caller, SecurityError, SecurityInput, SecurityStage, SessionPolicy, TurnError};
use std::sync::Arc;

/// Refuses inputs holding something that looks like a card number.
struct NoCardNumbers;

#[jarvis_sdk::async_trait]
impl SecurityStage for NoCardNumbers {
    fn name(&self) -> &str {
        "no-card-numbers"
    }

    async fn check(&self, input: &mut SecurityInput) -> Result<(), SecurityError> {
        SessionPolicy.check(input).await?;
        let digits_in_a_row = input
            .text
            .split(|c: char| !(c.is_ascii_digit() || c == ' ' || c == '-'))
            .map(|run| run.chars().filter(char::is_ascii_digit).count())
            .max()
            .unwrap_or(0);
        if digits_in_a_row >= 13 {
            return Err(SecurityError::Forbidden(
                "that looks like a card number; never send card numbers to an assistant".into(),
            ));
        }
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let home = std::env::temp_dir().join(format!("example-security-{}", std::process::id()));
    let mut config = AppConfig::embedded(&home).with_provider(Arc::new(FauxProvider::from_yaml(
        "fallback: { text: \"Noted.\" }",
    )?));
    config.policy = Some(Arc::new(NoCardNumbers));
    let app = build_app(config).await?;
    let session = app.session(&app.create_session(None).await?.id).await?;

    let fine = session
        .prompt("Remind me to pay rent on the 25th.", Caller::Local)
        .await?;
    println!("accepted: {}", fine.final_message.content);

    match session
        .prompt("My card is 4111 1111 1111 1111", Caller::Local)
        .await
    {
        Err(TurnError::Rejected(reason)) => println!("refused: {reason}"),
        other => anyhow::bail!("expected a refusal, got {other:?}"),
    }
    drop(app);
    let _ = std::fs::remove_dir_all(&home);
    Ok(())
}
