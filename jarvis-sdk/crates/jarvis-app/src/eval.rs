//! Eval suites: a YAML file of prompts and what their answers must show,
//! run against the configured model in a temporary home each
//! (`jarvis eval suite.yaml`, or [`run_eval`] from a test suite).
//!
//! ```yaml
//! threshold: 0.8            # the pass rate below which the run fails (default 1.0)
//! approvals: deny           # how approval requests are answered: deny (default) or allow
//! cases:
//!   - name: greets in Korean
//!     prompt: 안녕
//!     agent: main           # optional; the lead agent by default
//!     checks:
//!       contains: 안녕       # a text or a list; every one must be in the answer
//!       regex: "(?i)hello|안녕"
//!       tool_called: [web_fetch]      # the model called each of these
//!       no_tool_called: [run_command] # and none of these
//!       max_steps: 3        # model steps of the turn at most
//!       max_tokens: 4000    # input plus output tokens of the turn at most
//! ```
//!
//! With a cassette ([`run_eval_on_cassette`], `jarvis eval --cassette`),
//! each case's model calls, tool results and approvals come from the
//! cassette's turn recorded with the same prompt instead of the model.
//!
//! Each case runs in a fresh temporary home (removed afterwards) so no case
//! sees another's memory or sessions, and the configured home is never
//! written; the team is read from the configured team directory (the
//! default team when there is none yet), and the home's `approvals.yaml`, `approvals/`,
//! `prices.yaml` and `mcp.yaml` are copied in. A call that needs approval
//! is answered as the suite's `approvals` says, at once; `tool_called`
//! counts the calls the model made, whatever was decided. Tools called by
//! sub-agents or delegated agents are not counted.

use regex::Regex;
use serde::Deserialize;
use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{AppConfig, MAIN_AGENT, build_app};
use jarvis_agent::{AgentEvent, ApprovalDecision, ApprovalRequest, UIAdapter};
use jarvis_model::Message;
use jarvis_turn::cassette::Cassette;
use jarvis_turn::{ApprovalBroker, Caller, PromptOptions};

/// Files of a home an eval's temporary homes get a copy of.
const COPIED: &[&str] = &["approvals.yaml", "approvals", "prices.yaml", "mcp.yaml"];

/// A suite that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("eval suite: {0}")]
pub struct EvalError(pub String);

/// One text or several.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(one) => vec![one],
            OneOrMany::Many(many) => many,
        }
    }
}

/// How an eval answers approval requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvalApprovals {
    /// Every request is denied (the default: an eval runs no risky tool).
    #[default]
    Deny,
    /// Every request is allowed once.
    Allow,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    #[serde(default)]
    threshold: Option<f64>,
    #[serde(default)]
    approvals: EvalApprovals,
    cases: Vec<CaseFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    name: String,
    prompt: String,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    checks: ChecksFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChecksFile {
    contains: Option<OneOrMany>,
    regex: Option<String>,
    tool_called: Option<OneOrMany>,
    no_tool_called: Option<OneOrMany>,
    max_steps: Option<u32>,
    max_tokens: Option<u64>,
}

/// What a case's answer must show (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct EvalChecks {
    /// Texts the answer contains, each.
    pub contains: Vec<String>,
    /// A pattern the answer matches.
    pub regex: Option<Regex>,
    /// Tools the model called, each.
    pub tool_called: Vec<String>,
    /// Tools the model did not call.
    pub no_tool_called: Vec<String>,
    /// The most model steps the turn may take.
    pub max_steps: Option<u32>,
    /// The most tokens (input plus output) the turn may use.
    pub max_tokens: Option<u64>,
}

/// One case of a suite.
#[derive(Debug, Clone)]
pub struct EvalCase {
    /// Its name, unique in the suite.
    pub name: String,
    /// What the person asks.
    pub prompt: String,
    /// The agent asked (`main` when not given).
    pub agent: String,
    /// What the answer must show.
    pub checks: EvalChecks,
}

/// A suite: its cases and the pass rate it needs.
#[derive(Debug, Clone)]
pub struct EvalSuite {
    /// The pass rate (0 to 1) below which the suite fails.
    pub threshold: f64,
    /// How approval requests are answered.
    pub approvals: EvalApprovals,
    /// The cases, in the file's order.
    pub cases: Vec<EvalCase>,
}

impl EvalSuite {
    /// Reads a suite's YAML text; names what is wrong (an unknown field, a
    /// pattern that does not compile, a threshold outside 0–1, no case, a
    /// name used twice).
    pub fn parse(text: &str) -> Result<Self, EvalError> {
        let file: SuiteFile = serde_yaml::from_str(text).map_err(|e| EvalError(e.to_string()))?;
        let threshold = file.threshold.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&threshold) {
            return Err(EvalError(format!("threshold {threshold} is not between 0 and 1")));
        }
        if file.cases.is_empty() {
            return Err(EvalError("it has no cases".into()));
        }
        let mut cases: Vec<EvalCase> = Vec::with_capacity(file.cases.len());
        for case in file.cases {
            let name = case.name.trim().to_owned();
            if name.is_empty() {
                return Err(EvalError("a case has an empty name".into()));
            }
            if cases.iter().any(|c| c.name == name) {
                return Err(EvalError(format!("the case name {name:?} is used twice")));
            }
            if case.prompt.trim().is_empty() {
                return Err(EvalError(format!("case {name:?}: the prompt is empty")));
            }
            let c = case.checks;
            let regex = c
                .regex
                .map(|pattern| {
                    Regex::new(&pattern).map_err(|e| EvalError(format!("case {name:?}: regex: {e}")))
                })
                .transpose()?;
            cases.push(EvalCase {
                name,
                prompt: case.prompt,
                agent: case.agent.unwrap_or_else(|| MAIN_AGENT.to_owned()),
                checks: EvalChecks {
                    contains: c.contains.map(OneOrMany::into_vec).unwrap_or_default(),
                    regex,
                    tool_called: c.tool_called.map(OneOrMany::into_vec).unwrap_or_default(),
                    no_tool_called: c.no_tool_called.map(OneOrMany::into_vec).unwrap_or_default(),
                    max_steps: c.max_steps,
                    max_tokens: c.max_tokens,
                },
            });
        }
        Ok(Self {
            threshold,
            approvals: file.approvals,
            cases,
        })
    }
}

/// How one case went.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// Whether every check held (and the turn ran).
    pub passed: bool,
    /// What did not hold, in words (empty when it passed).
    pub failures: Vec<String>,
    /// The answer.
    pub answer: String,
    /// The tools the model called, in order.
    pub tools: Vec<String>,
    /// Model steps.
    pub steps: u32,
    /// Input plus output tokens.
    pub tokens: u64,
}

/// How a suite went.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalReport {
    /// The suite's threshold.
    pub threshold: f64,
    /// Each case, in the suite's order.
    pub cases: Vec<CaseResult>,
}

impl EvalReport {
    /// The share of cases that passed (0 to 1).
    pub fn pass_rate(&self) -> f64 {
        if self.cases.is_empty() {
            return 0.0;
        }
        self.cases.iter().filter(|c| c.passed).count() as f64 / self.cases.len() as f64
    }

    /// Whether the pass rate reaches the threshold.
    pub fn passed(&self) -> bool {
        self.pass_rate() + 1e-9 >= self.threshold
    }

    /// A table of the cases (result, name, steps, tokens, tools, what
    /// failed), then the pass rate against the threshold.
    pub fn table(&self) -> String {
        let width = self
            .cases
            .iter()
            .map(|c| c.name.chars().count())
            .max()
            .unwrap_or(4)
            .max(4);
        let mut out = format!(
            "{:<4}  {:<width$}  {:>5}  {:>7}  tools / failures\n",
            "", "case", "steps", "tokens"
        );
        for case in &self.cases {
            let tools = if case.tools.is_empty() {
                "-".to_owned()
            } else {
                case.tools.join(", ")
            };
            let _ = writeln!(
                out,
                "{:<4}  {:<width$}  {:>5}  {:>7}  {tools}",
                if case.passed { "pass" } else { "FAIL" },
                case.name,
                case.steps,
                case.tokens,
            );
            for failure in &case.failures {
                let _ = writeln!(
                    out,
                    "{:<4}  {:<width$}  {:>5}  {:>7}  - {failure}",
                    "", "", "", ""
                );
            }
        }
        let passed = self.cases.iter().filter(|c| c.passed).count();
        let _ = writeln!(
            out,
            "{passed}/{} passed ({:.0}%), threshold {:.0}%: {}",
            self.cases.len(),
            self.pass_rate() * 100.0,
            self.threshold * 100.0,
            if self.passed() {
                "ok"
            } else {
                "below the threshold"
            }
        );
        out
    }
}

/// The checks of `checks` that did not hold, in words.
fn failures(checks: &EvalChecks, answer: &str, tools: &[String], steps: u32, tokens: u64) -> Vec<String> {
    let mut out = Vec::new();
    for text in &checks.contains {
        if !answer.contains(text.as_str()) {
            out.push(format!("the answer does not contain {text:?}"));
        }
    }
    if let Some(regex) = &checks.regex
        && !regex.is_match(answer)
    {
        out.push(format!("the answer does not match /{}/", regex.as_str()));
    }
    for tool in &checks.tool_called {
        if !tools.contains(tool) {
            out.push(format!("{tool} was not called"));
        }
    }
    for tool in &checks.no_tool_called {
        if tools.contains(tool) {
            out.push(format!("{tool} was called"));
        }
    }
    if let Some(max) = checks.max_steps
        && steps > max
    {
        out.push(format!("{steps} steps, more than {max}"));
    }
    if let Some(max) = checks.max_tokens
        && tokens > max
    {
        out.push(format!("{tokens} tokens, more than {max}"));
    }
    out
}

/// A temporary home, removed when dropped.
pub(super) struct TempHome(PathBuf);

impl TempHome {
    fn new() -> std::io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "jarvis-eval-{}-{nanos}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies `from` (a file, or a directory's files) to `to`.
fn copy_config(from: &Path, to: &Path) -> std::io::Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::fs::copy(entry.path(), to.join(entry.file_name()))?;
            }
        }
    } else if from.is_file() {
        std::fs::copy(from, to)?;
    }
    Ok(())
}

/// Answers every approval request at once, as the suite says.
struct AutoApprove {
    broker: ApprovalBroker,
    decision: ApprovalDecision,
}

impl UIAdapter for AutoApprove {
    fn on_event(&self, _event: &AgentEvent) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn on_approval_request(&self, request: &ApprovalRequest) {
        self.broker.decide(&request.request_id, self.decision);
    }

    fn on_approval_resolved(&self, _request_id: &str, _decision: ApprovalDecision) {}
}

/// Runs every case of `suite`, one after the other, each in a fresh
/// temporary home: `config` is the configuration to run with (its
/// provider, team directory, settings); each case gets a copy with its
/// own home, into which the configuration files of `config.home` are
/// copied (see the module docs). A case whose app or turn fails fails
/// with the error as its reason.
pub async fn run_eval(suite: &EvalSuite, config: &AppConfig) -> EvalReport {
    run_cases(suite, config, None).await
}

/// [`run_eval`] with a cassette instead of the model: each case is answered
/// by the cassette's turn recorded with the same prompt (model calls, tool
/// results and approvals, as [`replay_cassette`](super::replay_cassette)
/// with `current` does), so the suite checks what the current code makes
/// of recorded answers, offline and deterministically. A case whose prompt
/// the cassette never saw fails saying so.
pub async fn run_eval_on_cassette(suite: &EvalSuite, config: &AppConfig, cassette: &Cassette) -> EvalReport {
    run_cases(suite, config, Some(cassette)).await
}

async fn run_cases(suite: &EvalSuite, config: &AppConfig, cassette: Option<&Cassette>) -> EvalReport {
    let mut cases = Vec::with_capacity(suite.cases.len());
    for case in &suite.cases {
        let result = match run_case(suite, case, config, cassette).await {
            Ok(result) => result,
            Err(error) => CaseResult {
                name: case.name.clone(),
                passed: false,
                failures: vec![error],
                answer: String::new(),
                tools: Vec::new(),
                steps: 0,
                tokens: 0,
            },
        };
        cases.push(result);
    }
    EvalReport {
        threshold: suite.threshold,
        cases,
    }
}

/// `config` moved to a fresh temporary home holding copies of the
/// configuration files of `config.home` (see the module docs); the home
/// goes when the [`TempHome`] is dropped.
pub(super) fn scratch_config(config: &AppConfig) -> Result<(TempHome, AppConfig), String> {
    let home = TempHome::new().map_err(|e| format!("could not make a temporary home: {e}"))?;
    for name in COPIED {
        copy_config(&config.home.join(name), &home.0.join(name))
            .map_err(|e| format!("could not copy {name} into the temporary home: {e}"))?;
    }
    let mut config = config.clone();
    config.home = home.0.clone();
    // The team is read, never written: a team directory that does not exist
    // yet is seeded in the temporary home instead.
    if config.team_dir.is_dir() {
        config.seed_team = false;
    } else if config.seed_team {
        config.team_dir = home.0.join("team");
    }
    Ok((home, config))
}

async fn run_case(
    suite: &EvalSuite,
    case: &EvalCase,
    config: &AppConfig,
    cassette: Option<&Cassette>,
) -> Result<CaseResult, String> {
    let recorded = match cassette {
        None => None,
        Some(cassette) => Some(
            cassette
                .turns
                .values()
                .find(|t| {
                    t.prompt() == Some(case.prompt.as_str()) && t.agent().is_none_or(|a| a == case.agent)
                })
                .ok_or_else(|| format!("the cassette has no turn of {} with this prompt", case.agent))?,
        ),
    };
    let (_home, mut config) = scratch_config(config)?;
    if recorded.is_some() {
        super::replay::from_cassette(&mut config);
    }
    let app = build_app(config).await.map_err(|e| e.to_string())?;
    if !app.registry().contains(&case.agent) {
        return Err(format!("there is no agent {:?} in the team", case.agent));
    }
    let meta = app
        .default_session(&case.agent)
        .await
        .map_err(|e| e.to_string())?;
    let session = app.session(&meta.id).await.map_err(|e| e.to_string())?;
    let mut options = PromptOptions::from(Caller::Local);
    let approver: Arc<dyn UIAdapter> = match recorded {
        Some(recorded) => {
            let (tap, approvals) = super::replay::answer_from(recorded, session.broker().clone());
            options.tap = Some(tap);
            approvals
        }
        None => Arc::new(AutoApprove {
            broker: session.broker().clone(),
            decision: match suite.approvals {
                EvalApprovals::Deny => ApprovalDecision::Deny,
                EvalApprovals::Allow => ApprovalDecision::Allow,
            },
        }),
    };
    let _approver = session.attach(approver);
    let outcome = session
        .prompt_with(case.prompt.clone(), options)
        .await
        .map_err(|e| format!("the turn failed: {e}"))?;
    let tools: Vec<String> = outcome
        .new_messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant(a) => Some(a.tool_calls.iter().map(|c| c.name.clone()).collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .collect();
    let usage = &outcome.final_message.usage;
    let tokens = usage.input_tokens + usage.output_tokens;
    let answer = outcome.final_message.content.clone();
    let failures = failures(&case.checks, &answer, &tools, outcome.turns, tokens);
    Ok(CaseResult {
        name: case.name.clone(),
        passed: failures.is_empty(),
        failures,
        answer,
        tools,
        steps: outcome.turns,
        tokens,
    })
}
