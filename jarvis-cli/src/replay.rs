//! `jarvis replay <session_id|cassette> [--against current|model]`: runs a
//! recorded session's prompts again through this build (see docs/tracing-and-replay.md,
//! "Replay and evals"), prints a readable diff per turn, and exits 0 when
//! every turn ran as recorded, 1 when one differs, 2 when the cassette
//! cannot be read.

use std::path::PathBuf;
use std::process::ExitCode;

use jarvis_sdk::app::{ReplayAgainst, replay_cassette};
use jarvis_sdk::turn::{cassette::CASSETTES_DIR, cassette::Cassette};

use crate::home::config_from_env;

/// The cassette `target` names: a file, or a session of the home.
pub(crate) fn cassette_path(target: &str, home: &std::path::Path) -> PathBuf {
    let file = PathBuf::from(target);
    if file.is_file() || target.ends_with(".jsonl") || target.contains(std::path::MAIN_SEPARATOR) {
        file
    } else {
        home.join(CASSETTES_DIR).join(format!("{target}.jsonl"))
    }
}

/// Replays `target` against `against`.
pub(crate) async fn run(target: &str, against: ReplayAgainst) -> anyhow::Result<ExitCode> {
    let config = config_from_env()?;
    let path = cassette_path(target, &config.home);
    let cassette = match Cassette::read(&path) {
        Ok(cassette) => cassette,
        Err(error) => {
            eprintln!("jarvis replay: {}: {error}", path.display());
            return Ok(ExitCode::from(2));
        }
    };
    let report = replay_cassette(&cassette, &config, against).await?;
    print!("{report}");
    Ok(if report.same() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
