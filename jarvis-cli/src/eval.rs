//! `jarvis eval suite.yaml [--threshold X] [--cassette C]`: runs an eval
//! suite (format in docs/tracing-and-replay.md, "Replay and evals") against the configured
//! model (or a cassette's recorded answers), each case
//! in a temporary home, prints a table and the pass rate, and exits 0 when
//! the pass rate reaches the threshold, 1 below it, 2 when the suite cannot
//! be read.

use std::path::Path;
use std::process::ExitCode;

use jarvis_sdk::app::{EvalSuite, run_eval, run_eval_on_cassette};
use jarvis_sdk::turn::cassette::Cassette;

use crate::home::config_from_env;

/// Runs the suite at `path`; `threshold` overrides the suite's; with
/// `cassette` (a file or a session id of the home) the cassette answers.
pub(crate) async fn run(
    path: &Path,
    threshold: Option<f64>,
    cassette: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let suite = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|text| EvalSuite::parse(&text).map_err(|e| e.to_string()));
    let mut suite = match suite {
        Ok(suite) => suite,
        Err(error) => {
            eprintln!("jarvis eval: {}: {error}", path.display());
            return Ok(ExitCode::from(2));
        }
    };
    if let Some(threshold) = threshold {
        if !(0.0..=1.0).contains(&threshold) {
            eprintln!("jarvis eval: --threshold {threshold} is not between 0 and 1");
            return Ok(ExitCode::from(2));
        }
        suite.threshold = threshold;
    }
    let config = config_from_env()?;
    let report = match cassette {
        None => run_eval(&suite, &config).await,
        Some(target) => {
            let file = crate::replay::cassette_path(target, &config.home);
            match Cassette::read(&file) {
                Ok(cassette) => run_eval_on_cassette(&suite, &config, &cassette).await,
                Err(error) => {
                    eprintln!("jarvis eval: {}: {error}", file.display());
                    return Ok(ExitCode::from(2));
                }
            }
        }
    };
    print!("{}", report.table());
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
