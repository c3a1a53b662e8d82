//! Layered approval rules (SPEC.md §11.7): the shared
//! `$JARVIS_HOME/approvals.yaml`, which people edit and every agent reads,
//! under each agent's own `$JARVIS_HOME/approvals/<agent>.yaml`, where
//! "always allow" writes.
//!
//! A rule file is a YAML list of `{tool, args?, decision}`:
//!
//! ```yaml
//! # $JARVIS_HOME/approvals.yaml
//! - { tool: run_command, args: { program: "git" }, decision: allow }
//! - { tool: write_file, args: { path: "notes/*" }, decision: allow }
//! - { tool: run_command, args: { program: "rm" }, decision: deny }
//! - { tool: web_fetch, decision: allow }
//! ```
//!
//! `tool` and each value in `args` are glob patterns (`*`, `?`, `\` to
//! escape; see the `glob` module). An argument named in `args` must be
//! present and match: strings are matched as they are, other JSON values by
//! their compact JSON text (`args: ["status"]` is matched as `["status"]`).
//! Arguments a rule does not name may be anything. `decision` is `allow` or
//! `deny`.
//!
//! **Rules see the call as it will run.** The loop prepares every call
//! before the gate (see [`prepare_call`](crate::prepare_call)): sandbox
//! paths are normalised, so `notes/*` is matched against `x` for
//! `notes/../x` (and does not match it), and a path that climbs out of the
//! sandbox is refused before any rule is read. An argument that names a
//! program (`run_command`'s `program`) is matched against the file that
//! will run:
//!
//! - a pattern containing `/` matches the canonical path of that file
//!   (every symlink resolved; `/bin/rm` is `/usr/bin/rm` where `/bin` links
//!   to `/usr/bin`); a pattern without wildcards is resolved the same way
//!   first, so `program: "/bin/rm"` names that file wherever it is. A
//!   relative pattern (`./build.sh`, `scripts/*`) matches the file's path
//!   inside the session's sandbox;
//! - a bare name in an **allow** rule (`git`) matches only when the file
//!   that will run is the file that name resolves to on the tool's `PATH`:
//!   `allow git` allows `git`, `/usr/local/bin/git` when that is the `git`
//!   on `PATH`, never a `./git` written into the sandbox;
//! - a bare name in a **deny** rule matches any program with that file
//!   name (as written, where it was found, or after symlinks): `deny rm`
//!   catches `rm`, `/bin/rm`, `/usr/bin/rm` and `./rm`.
//!
//! **What a rule does not constrain.** A rule sees the arguments of one
//! call, not what the program then does: an allow rule for `git` allows
//! `git -c core.pager=… log`, whatever a repository's hooks or aliases run,
//! and a script allowed by path runs whatever it contains when it runs. An
//! allow rule for `run_python` allows the code it matches, and code can do
//! anything the sandbox lets it. Deny rules on names are a tripwire, not a
//! boundary: a program can be copied and renamed inside the sandbox (a
//! deny rule on a path pattern or on `run_command` as a whole holds). What
//! bounds every program, whatever the rules say, is the sandbox's kernel
//! confinement (see the `tools` module).
//!
//! The agent's file is consulted first, then the deployment's shared rules
//! when there are any ([`SharedRuleStore`]: several nodes on one Postgres,
//! where "always allow" writes to the table `jarvis_approval_rules` instead
//! of the agent's file), then the shared file; in each, the first matching
//! rule decides. Files are re-read when they change. A file
//! that does not parse is ignored with a warning (it is never rewritten);
//! a bad rule (also one with an invalid pattern) is skipped with a warning
//! and the others still apply.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::glob::{Pattern, glob_escape};
use jarvis_agent::{ResolvedProgram, ToolCallInfo};
use jarvis_common::write_atomic;

/// What a rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleDecision {
    /// Run without asking.
    Allow,
    /// Refuse without asking.
    Deny,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRule {
    /// Glob pattern of the tool name.
    pub tool: String,
    /// Glob patterns of argument values, by argument name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, String>,
    /// What the rule decides.
    pub decision: RuleDecision,
}

impl ApprovalRule {
    /// Whether the rule covers a call of `tool` with `args`, every argument
    /// matched as text (no program resolution; see
    /// [`ApprovalRule::matches_call`]). A rule with an invalid pattern
    /// matches nothing.
    pub fn matches(&self, tool: &str, args: &Value) -> bool {
        CompiledRule::new(self.clone()).is_ok_and(|rule| rule.matches(tool, args, &[]))
    }

    /// Whether the rule covers `call`, its program arguments matched
    /// against the files that will run (see the module documentation).
    pub fn matches_call(&self, call: &ToolCallInfo<'_>) -> bool {
        CompiledRule::new(self.clone())
            .is_ok_and(|rule| rule.matches(call.tool_name, call.arguments, call.programs))
    }

    /// The rule that allows exactly this call.
    pub fn allow_exactly(tool: &str, args: &Value) -> Self {
        let args = match args {
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| {
                    let text = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), glob_escape(&text))
                })
                .collect(),
            _ => BTreeMap::new(),
        };
        Self {
            tool: glob_escape(tool),
            args,
            decision: RuleDecision::Allow,
        }
    }
}

/// A rule with its patterns compiled.
#[derive(Debug, Clone)]
struct CompiledRule {
    rule: ApprovalRule,
    tool: Pattern,
    args: Vec<(String, Pattern, ProgramPattern)>,
}

/// How an argument pattern reads when the argument names a program.
#[derive(Debug, Clone)]
enum ProgramPattern {
    /// Starts with `/`: the canonical file's path.
    Absolute,
    /// Contains `/` but does not start with it: the file's path inside the
    /// sandbox, matched by this pattern (leading `./` removed).
    InSandbox(Pattern),
    /// No `/`: a file name.
    Bare,
}

impl CompiledRule {
    fn new(rule: ApprovalRule) -> Result<Self, String> {
        let tool = Pattern::new(&rule.tool)?;
        let mut args = Vec::with_capacity(rule.args.len());
        for (name, text) in &rule.args {
            let pattern = Pattern::new(text)?;
            let program = if text.starts_with('/') {
                ProgramPattern::Absolute
            } else if text.contains('/') {
                let mut relative = text.as_str();
                while let Some(rest) = relative.strip_prefix("./") {
                    relative = rest.trim_start_matches('/');
                }
                ProgramPattern::InSandbox(Pattern::new(relative)?)
            } else {
                ProgramPattern::Bare
            };
            args.push((name.clone(), pattern, program));
        }
        Ok(Self { rule, tool, args })
    }

    fn matches(&self, tool: &str, args: &Value, programs: &[ResolvedProgram]) -> bool {
        self.tool.is_match(tool)
            && self.args.iter().all(|(name, pattern, program)| {
                match programs.iter().find(|p| &p.argument == name) {
                    Some(resolved) => self.matches_program(pattern, program, resolved),
                    None => match args.get(name) {
                        Some(Value::String(s)) => pattern.is_match(s),
                        Some(other) => pattern.is_match(&other.to_string()),
                        None => false,
                    },
                }
            })
    }

    /// Matches a program argument: allow rules strictly (the file that
    /// runs), deny rules broadly (any name the program goes by).
    fn matches_program(
        &self,
        pattern: &Pattern,
        program: &ProgramPattern,
        resolved: &ResolvedProgram,
    ) -> bool {
        let deny = self.rule.decision == RuleDecision::Deny;
        match program {
            ProgramPattern::Absolute => {
                let text = |p: &Path| p.to_string_lossy().into_owned();
                let names_file = pattern
                    .literal()
                    .and_then(|literal| std::fs::canonicalize(literal).ok())
                    .is_some_and(|named| named == resolved.file);
                names_file
                    || pattern.is_match(&text(&resolved.file))
                    || (deny && pattern.is_match(&text(&resolved.located)))
            }
            ProgramPattern::InSandbox(relative) => {
                let inside = resolved
                    .in_sandbox
                    .as_deref()
                    .is_some_and(|p| relative.is_match(p));
                let written = deny
                    && !resolved.written.starts_with('/')
                    && jarvis_agent::normalize_sandbox_path(&resolved.written)
                        .is_ok_and(|w| relative.is_match(&w));
                inside || written
            }
            ProgramPattern::Bare if deny => resolved.file_names().iter().any(|n| pattern.is_match(n)),
            ProgramPattern::Bare => resolved.path_names.iter().any(|n| pattern.is_match(n)),
        }
    }
}

/// Which file a decision came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleSource {
    /// The agent's own file.
    Agent(PathBuf),
    /// The shared file.
    Shared(PathBuf),
    /// The deployment's shared rules ([`SharedRuleStore`]).
    Deployment,
}

/// "Always allow" rules kept for a whole deployment rather than in one
/// home's files: several nodes on one Postgres, where a rule one node
/// remembers must hold on every node. Read on every gate decision that the
/// agent's own file did not settle (one round trip), so a rule remembered
/// on one node holds on the next call on any node.
#[async_trait]
pub trait SharedRuleStore: Send + Sync + std::fmt::Debug {
    /// The rules of `agent_id`, oldest first.
    async fn rules(&self, agent_id: &str) -> Result<Vec<ApprovalRule>, String>;
    /// Adds `rule` for `agent_id`; `false` when it was there already.
    async fn add(&self, agent_id: &str, rule: &ApprovalRule) -> Result<bool, String>;
}

/// Why rules could not be used or saved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// The agent id cannot name a rule file.
    #[error("approval rules: {0:?} is not a valid agent id")]
    InvalidAgent(String),
    /// A rule file could not be read or written.
    #[error("approval rules: cannot {action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The agent's file does not parse, so it is not rewritten.
    #[error(
        "approval rules: {path} is not a valid rule list ({message}); fix it by hand, it was left unchanged"
    )]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The parse error.
        message: String,
    },
    /// The deployment's rule store refused the rule.
    #[error("approval rules: the deployment's rule store could not save the rule: {0}")]
    Shared(String),
}

#[derive(Debug)]
struct Cached {
    stamp: Option<(SystemTime, u64)>,
    rules: Vec<CompiledRule>,
}

/// The shared and per-agent rule files under one `JARVIS_HOME`.
#[derive(Debug)]
pub struct LayeredApprovalRules {
    home: PathBuf,
    cache: Mutex<HashMap<PathBuf, Cached>>,
    write: Mutex<()>,
    shared: Option<Arc<dyn SharedRuleStore>>,
}

/// Whether `id` is a valid agent id (R-DEF-4): `^[a-z][a-z0-9_-]{0,31}$`.
pub(super) fn valid_agent_id(id: &str) -> bool {
    let mut chars = id.chars();
    matches!(chars.next(), Some('a'..='z'))
        && id.len() <= 32
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
}

impl LayeredApprovalRules {
    /// Rules under `home` (`$JARVIS_HOME`).
    pub fn new(home: impl Into<PathBuf>) -> Self {
        Self {
            home: home.into(),
            cache: Mutex::default(),
            write: Mutex::new(()),
            shared: None,
        }
    }

    /// Reads the deployment's rules from `store` too (between the agent's
    /// file and the shared file), and makes "always allow" write there
    /// instead of the agent's file ([`LayeredApprovalRules::remember`]).
    pub fn with_shared(mut self, store: Arc<dyn SharedRuleStore>) -> Self {
        self.shared = Some(store);
        self
    }

    /// What the tool gate consults: the agent's file, then the
    /// deployment's rules (when [`with_shared`](Self::with_shared) gave a
    /// store; a store that cannot answer is logged and skipped, so the
    /// call is asked about rather than allowed), then the shared file. The
    /// call's program arguments are matched against the files that will
    /// run.
    pub async fn decide_gate(&self, call: &ToolCallInfo<'_>) -> Option<(RuleDecision, RuleSource)> {
        let (agent, tool, args, programs) = (call.agent_id, call.tool_name, call.arguments, call.programs);
        let Some(store) = &self.shared else {
            return self.decide_call(call);
        };
        if let Some(found) = self.decide_in_agent_file(agent, tool, args, programs) {
            return Some(found);
        }
        match store.rules(agent).await {
            Ok(rules) => {
                let hit = rules
                    .into_iter()
                    .filter_map(|rule| CompiledRule::new(rule).ok())
                    .find(|rule| rule.matches(tool, args, programs));
                if let Some(rule) = hit {
                    return Some((rule.rule.decision, RuleSource::Deployment));
                }
            }
            Err(error) => {
                tracing::warn!(%error, agent, "approval rules: the deployment's rules could not be read; they are skipped for this call")
            }
        }
        self.decide_in_shared_file(tool, args, programs)
    }

    /// "Always allow" as the tool gate does it: into the deployment's
    /// rules when there is a store ([`with_shared`](Self::with_shared)),
    /// otherwise into the agent's file
    /// ([`remember_allow`](Self::remember_allow)). Returns `false` when an
    /// identical rule was already there.
    pub async fn remember(&self, agent_id: &str, tool: &str, args: &Value) -> Result<bool, ApprovalError> {
        let Some(store) = &self.shared else {
            return self.remember_allow(agent_id, tool, args);
        };
        if !valid_agent_id(agent_id) {
            return Err(ApprovalError::InvalidAgent(agent_id.to_owned()));
        }
        let rule = ApprovalRule::allow_exactly(tool, args);
        let added = store.add(agent_id, &rule).await.map_err(ApprovalError::Shared)?;
        if added {
            tracing::info!(
                agent = agent_id,
                tool,
                "approval rule remembered for the deployment"
            );
        }
        Ok(added)
    }

    /// `$JARVIS_HOME/approvals.yaml`.
    pub fn shared_path(&self) -> PathBuf {
        self.home.join("approvals.yaml")
    }

    /// `$JARVIS_HOME/approvals/<agent>.yaml`.
    pub fn agent_path(&self, agent_id: &str) -> Result<PathBuf, ApprovalError> {
        if !valid_agent_id(agent_id) {
            return Err(ApprovalError::InvalidAgent(agent_id.to_owned()));
        }
        Ok(self.home.join("approvals").join(format!("{agent_id}.yaml")))
    }

    /// The decision of the first matching rule, the agent's file first,
    /// then the shared one, every argument matched as text (no program
    /// resolution; the approval broker uses [`LayeredApprovalRules::decide_call`]).
    pub fn decide(&self, agent_id: &str, tool: &str, args: &Value) -> Option<(RuleDecision, RuleSource)> {
        self.decide_with(agent_id, tool, args, &[])
    }

    /// The decision of the first matching rule for a prepared call: its
    /// program arguments are matched against the files that will run (see
    /// the module documentation).
    pub fn decide_call(&self, call: &ToolCallInfo<'_>) -> Option<(RuleDecision, RuleSource)> {
        self.decide_with(call.agent_id, call.tool_name, call.arguments, call.programs)
    }

    fn decide_with(
        &self,
        agent_id: &str,
        tool: &str,
        args: &Value,
        programs: &[ResolvedProgram],
    ) -> Option<(RuleDecision, RuleSource)> {
        self.decide_in_agent_file(agent_id, tool, args, programs)
            .or_else(|| self.decide_in_shared_file(tool, args, programs))
    }

    fn decide_in_agent_file(
        &self,
        agent_id: &str,
        tool: &str,
        args: &Value,
        programs: &[ResolvedProgram],
    ) -> Option<(RuleDecision, RuleSource)> {
        let path = self.agent_path(agent_id).ok()?;
        let rule = self
            .rules(&path)
            .into_iter()
            .find(|r| r.matches(tool, args, programs))?;
        Some((rule.rule.decision, RuleSource::Agent(path)))
    }

    fn decide_in_shared_file(
        &self,
        tool: &str,
        args: &Value,
        programs: &[ResolvedProgram],
    ) -> Option<(RuleDecision, RuleSource)> {
        let shared = self.shared_path();
        let rule = self
            .rules(&shared)
            .into_iter()
            .find(|r| r.matches(tool, args, programs))?;
        Some((rule.rule.decision, RuleSource::Shared(shared)))
    }

    /// "Always allow": appends the rule allowing exactly this call to the
    /// agent's file (atomically, keeping what people wrote there). Returns
    /// `false` when an identical rule was already there.
    pub fn remember_allow(&self, agent_id: &str, tool: &str, args: &Value) -> Result<bool, ApprovalError> {
        let path = self.agent_path(agent_id)?;
        let rule = ApprovalRule::allow_exactly(tool, args);
        let _guard = self.write.lock().unwrap_or_else(|e| e.into_inner());
        let existing = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(ApprovalError::Io {
                    action: "read",
                    path,
                    source,
                });
            }
        };
        let entry = serde_yaml::to_string(&vec![&rule]).unwrap_or_default();
        let text = match existing {
            None => format!(
                "# Approval rules of agent {agent_id}: \"always allow\" adds rules here.\n\
                 # Format: a list of {{tool, args?, decision: allow | deny}} with glob patterns.\n{entry}"
            ),
            Some(text) => {
                let parsed = parse(&text).map_err(|message| ApprovalError::Malformed {
                    path: path.clone(),
                    message,
                })?;
                if parsed.contains(&rule) {
                    return Ok(false);
                }
                let has_content = text
                    .lines()
                    .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
                if parsed.is_empty() && has_content {
                    // An empty flow list (`[]`) cannot be appended to.
                    entry
                } else if text.is_empty() || text.ends_with('\n') {
                    format!("{text}{entry}")
                } else {
                    format!("{text}\n{entry}")
                }
            }
        };
        let dir = path.parent().unwrap_or(&self.home);
        std::fs::create_dir_all(dir).map_err(|source| ApprovalError::Io {
            action: "create",
            path: dir.to_owned(),
            source,
        })?;
        write_atomic(&path, text.as_bytes()).map_err(|source| ApprovalError::Io {
            action: "write",
            path: path.clone(),
            source,
        })?;
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).remove(&path);
        tracing::info!(agent = agent_id, tool, path = %path.display(), "approval rule remembered");
        Ok(true)
    }

    /// The rules of one file, re-read when its size or time changed.
    fn rules(&self, path: &Path) -> Vec<CompiledRule> {
        let stamp = std::fs::metadata(path)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cached) = cache.get(path)
            && cached.stamp == stamp
        {
            return cached.rules.clone();
        }
        let rules = match stamp {
            None => Vec::new(),
            Some(_) => match std::fs::read_to_string(path) {
                Ok(text) => match parse(&text) {
                    Ok(rules) => compile(path, rules),
                    Err(message) => {
                        tracing::warn!(path = %path.display(), %message, "approval rule file ignored: it does not parse");
                        Vec::new()
                    }
                },
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "approval rule file ignored: it cannot be read");
                    Vec::new()
                }
            },
        };
        cache.insert(
            path.to_owned(),
            Cached {
                stamp,
                rules: rules.clone(),
            },
        );
        rules
    }
}

/// Compiles the rules of `path`; a rule with an invalid pattern is skipped
/// with a warning.
fn compile(path: &Path, rules: Vec<ApprovalRule>) -> Vec<CompiledRule> {
    rules
        .into_iter()
        .enumerate()
        .filter_map(|(i, rule)| match CompiledRule::new(rule) {
            Ok(rule) => Some(rule),
            Err(error) => {
                tracing::warn!(path = %path.display(), rule = i + 1, %error, "approval rule skipped");
                None
            }
        })
        .collect()
}

/// Parses a rule file; bad rules are skipped with a warning.
fn parse(text: &str) -> Result<Vec<ApprovalRule>, String> {
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    let items = match value {
        serde_yaml::Value::Null => return Ok(Vec::new()),
        serde_yaml::Value::Sequence(items) => items,
        _ => return Err("the file must be a list of rules".into()),
    };
    Ok(items
        .into_iter()
        .enumerate()
        .filter_map(|(i, item)| match serde_yaml::from_value::<ApprovalRule>(item) {
            Ok(rule) => Some(rule),
            Err(error) => {
                tracing::warn!(rule = i + 1, %error, "approval rule skipped");
                None
            }
        })
        .collect())
}
