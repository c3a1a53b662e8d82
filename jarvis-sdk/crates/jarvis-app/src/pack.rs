//! [`Pack`]: the plug point for domain packs. A pack brings the tools of
//! one domain (agent-only ones say so with [`Tool::agent_only`]), the jobs
//! it runs on the scheduler, the kinds of external source it reads, and the
//! team files that introduce its agents. [`build_app`](super::build_app)
//! registers no domain by itself: an app has a pack's parts when its config
//! names the pack ([`AppConfig::with_pack`](super::AppConfig::with_pack)).
//!
//! A pack is written against the crate's public API only, as a third party
//! would write one; the SDK's own packs live under `src/packs/`, each behind
//! a cargo feature named like it.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use jarvis_agent::Tool;
use jarvis_common::{Clock, TimeZone};
use jarvis_initiative::{BuiltinJob, ProactiveSink};

/// A domain pack; see the module docs.
pub trait Pack: Send + Sync + fmt::Debug {
    /// Its name, for logs and errors.
    fn name(&self) -> &str;

    /// Team files (`<agent id>.yaml`, text) written into a team directory
    /// the app creates; an existing directory is left alone.
    fn team_files(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }

    /// Builds the pack's parts for one app; called once per
    /// [`build_app`](super::build_app). An error stops the build, naming
    /// the pack.
    fn build(&self, cx: &PackContext<'_>) -> Result<PackParts, String>;
}

/// What a pack's parts may use.
pub struct PackContext<'a> {
    /// `JARVIS_HOME`: where the pack keeps its files.
    pub home: &'a Path,
    /// The app's clock.
    pub clock: Arc<dyn Clock>,
    /// The person's time zone.
    pub time_zone: TimeZone,
    /// Whether the built-in offline demo plays (no model configured): a pack
    /// may stand sample data in for services nobody has configured.
    pub demo: bool,
    /// The configuration variables (the process environment).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Where the pack's jobs leave messages for agents: queued durably and
    /// recorded exactly once per message id.
    pub sink: Arc<dyn ProactiveSink>,
}

impl fmt::Debug for PackContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackContext")
            .field("home", &self.home)
            .field("time_zone", &self.time_zone)
            .field("demo", &self.demo)
            .finish_non_exhaustive()
    }
}

/// What a pack adds to one app, built with [`PackParts::new`] and the
/// `with_*` methods (it is `non_exhaustive`, so a feature that adds a part,
/// such as `sources`, never breaks a pack written without it).
#[derive(Default)]
#[non_exhaustive]
pub struct PackParts {
    /// Tools, registered beside the built-in ones (a name taken twice stops
    /// the build).
    pub tools: Vec<Arc<dyn Tool>>,
    /// Jobs on the scheduler ([`JobOrigin::BuiltIn`](jarvis_initiative::JobOrigin)).
    pub jobs: Vec<Arc<dyn BuiltinJob>>,
    /// Kinds of external source (`external_sources/*.yaml`, `kind: <name>`);
    /// set with `with_source_kind` (feature `sources`).
    #[cfg(feature = "sources")]
    pub(crate) source_kinds: Vec<Arc<dyn jarvis_initiative::SourceType>>,
}

impl PackParts {
    /// No parts yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool.
    pub fn with_tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds tools.
    pub fn with_tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Adds a job for the scheduler.
    pub fn with_job(mut self, job: Arc<dyn BuiltinJob>) -> Self {
        self.jobs.push(job);
        self
    }

    /// Adds a kind of external source.
    #[cfg(feature = "sources")]
    pub fn with_source_kind(mut self, kind: Arc<dyn jarvis_initiative::SourceType>) -> Self {
        self.source_kinds.push(kind);
        self
    }
}

impl fmt::Debug for PackParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("PackParts");
        s.field("tools", &self.tools.iter().map(|t| t.name()).collect::<Vec<_>>())
            .field("jobs", &self.jobs);
        #[cfg(feature = "sources")]
        s.field("source_kinds", &self.source_kinds);
        s.finish()
    }
}
