//! The housing pack: KAREN's domain (SPEC.md §15.2, R-DEF-7), built on the
//! crate's public API only. [`HousingPack`] brings six agent-only tools,
//! notice look-ups for LH and SH (`lh_notice`, `sh_notice`), loan maths
//! (`housing_loan`), notices that fit a budget (`housing_budget`), the
//! person's housing profile (`housing_profile`) and watches on new notices
//! (`housing_watch`); the scheduler job that reports new notices for the
//! watches ([`WatchJob`]); the external source kind `housing`
//! ([`HousingSourceKind`]); and KAREN's team file ([`KAREN_DEFINITION`]).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use jarvis_sdk::app::AppConfig;
//! # use jarvis_pack_housing::HousingPack;
//! let config = AppConfig::embedded("/tmp/jarvis-home").with_pack(Arc::new(HousingPack::from_env()));
//! ```
//!
//! Notices come through the [`NoticeSource`] trait:
//!
//! - [`LhNoticeSource`] calls LH's documented notice API on data.go.kr;
//! - [`ShNoticeSource`] reads a configured JSON feed, because SH has no
//!   public API that could be verified (an unconfigured look-up says so);
//! - [`FixtureNoticeSource`] serves bundled sample notices, marked as such,
//!   for the offline demo and tests.
//!
//! [`HousingConfig::from_env`] picks sources and stores from
//! `JARVIS_HOUSING__*`; [`housing_tools`] turns a configuration into the
//! six tools, named in [`HOUSING_TOOLS`].

mod budget;
mod error;
mod feed;
mod fixture;
mod format;
mod job;
mod lh;
mod loan;
mod lookup;
mod notice;
mod profile;
mod sh;
mod store;
mod watch;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use budget::{DEFAULT_REFERENCE_RATE, HousingBudgetArgs, HousingBudgetTool, REFERENCE_LOAN_YEARS};
pub use error::{HousingError, NoticeError};
pub use fixture::FixtureNoticeSource;
pub use job::{
    DEFAULT_WATCH_INTERVAL, HOUSING_SOURCE_KIND, HOUSING_WATCH_JOB, HousingSourceKind, WATCH_AGENT, WatchJob,
    WatchPass,
};
pub use lh::{LH_BASE_URL, LH_BASE_URL_ENV, LH_NOTICE_PATH, LH_SERVICE_KEY_ENV, LhConfig, LhNoticeSource};
pub use loan::{
    HousingLoanArgs, HousingLoanTool, LoanMonth, LoanSchedule, LoanTerms, MAX_PRINCIPAL, MAX_YEARS,
    RepaymentMethod, amortize,
};
pub use lookup::{NoticeArgs, NoticeTool};
pub use notice::{
    DEFAULT_NOTICE_LIMIT, MAX_NOTICE_LIMIT, Notice, NoticeAgency, NoticeQuery, NoticeSource,
    UnconfiguredSource, sort_newest_first,
};
pub use profile::{
    FileProfileStore, HousingProfile, HousingProfileArgs, HousingProfileTool, IncomeBand, MemoryProfileStore,
    PROFILE_FILE, ProfileAction, ProfileStore,
};
pub use sh::{SH_NOT_CONFIGURED, SH_URL_ENV, ShFeed, ShNoticeSource};
pub use store::EXTERNAL_SEEN_FILE;
pub use watch::{
    FileWatchStore, HousingWatchArgs, HousingWatchTool, MemoryWatchStore, NoticeWatch, WATCHES_FILE,
    WatchAdded, WatchStore, check_watch, new_notices, normalize_watch_text, watch_report,
};

use jarvis_sdk::agent::{Tool, Typed};
use jarvis_sdk::app::{Pack, PackContext, PackParts};

/// KAREN's definition, written into a new team directory as `karen.yaml`.
pub const KAREN_DEFINITION: &str = include_str!("../team/karen.yaml");

/// The housing tools, in the order [`housing_tools`] builds them; all of
/// them are agent-only ([`Tool::agent_only`]).
pub const HOUSING_TOOLS: [&str; 6] = [
    "lh_notice",
    "sh_notice",
    "housing_loan",
    "housing_budget",
    "housing_profile",
    "housing_watch",
];

/// Chooses live sources (`live`, the default) or the bundled samples
/// (`fixture`) for both look-ups.
pub const HOUSING_MODE_ENV: &str = "JARVIS_HOUSING__MODE";
/// Seconds of silence a notice request may wait (default 20).
pub const HOUSING_TIMEOUT_ENV: &str = "JARVIS_HOUSING__TIMEOUT_SECS";
/// The reference loan rate (%) `housing_budget` prices a sale's gap at.
pub const HOUSING_REFERENCE_RATE_ENV: &str = "JARVIS_HOUSING__REFERENCE_RATE";
/// How often `housing_watch` runs, in seconds (60 to 86,400; default 1,800).
pub const HOUSING_WATCH_EVERY_ENV: &str = "JARVIS_HOUSING__WATCH_EVERY_SECS";

/// Everything the housing tools run on.
#[derive(Debug, Clone)]
pub struct HousingConfig {
    /// Where `lh_notice` looks.
    pub lh: Arc<dyn NoticeSource>,
    /// Where `sh_notice` looks.
    pub sh: Arc<dyn NoticeSource>,
    /// Where the housing profile is kept.
    pub profiles: Arc<dyn ProfileStore>,
    /// Where watches are kept (the scheduler reads them from here).
    pub watches: Arc<dyn WatchStore>,
    /// The yearly rate (%) of `housing_budget`'s reference loan.
    pub reference_rate_percent: f64,
    /// How often the scheduler's `housing_watch` job looks for new notices
    /// (`JARVIS_HOUSING__WATCH_EVERY_SECS`, whole seconds from 60 to a
    /// day; default 30 minutes).
    pub watch_every: Duration,
}

impl HousingConfig {
    /// Sample sources for both agencies and file stores under `home`: the
    /// offline demo.
    pub fn fixture(home: &Path) -> Self {
        Self {
            lh: Arc::new(FixtureNoticeSource::lh()),
            sh: Arc::new(FixtureNoticeSource::sh()),
            profiles: Arc::new(FileProfileStore::in_home(home)),
            watches: Arc::new(FileWatchStore::in_home(home)),
            reference_rate_percent: DEFAULT_REFERENCE_RATE,
            watch_every: job::DEFAULT_WATCH_INTERVAL,
        }
    }

    /// Sample sources and in-memory stores: tests and embedding without a
    /// home directory.
    pub fn in_memory() -> Self {
        Self {
            lh: Arc::new(FixtureNoticeSource::lh()),
            sh: Arc::new(FixtureNoticeSource::sh()),
            profiles: Arc::new(MemoryProfileStore::new()),
            watches: Arc::new(MemoryWatchStore::new()),
            reference_rate_percent: DEFAULT_REFERENCE_RATE,
            watch_every: job::DEFAULT_WATCH_INTERVAL,
        }
    }

    /// The configuration the environment describes, with file stores under
    /// `home` (`$JARVIS_HOME`):
    ///
    /// | variable | meaning |
    /// |---|---|
    /// | `JARVIS_HOUSING__MODE` | `live` (default) or `fixture` (bundled samples for both look-ups) |
    /// | `JARVIS_HOUSING__LH_SERVICE_KEY` | the data.go.kr service key for LH's notice API |
    /// | `JARVIS_HOUSING__LH_BASE_URL` | default `https://apis.data.go.kr/B552555` |
    /// | `JARVIS_HOUSING__SH_URL` | an SH notice feed: `http(s)://` URL or file path |
    /// | `JARVIS_HOUSING__TIMEOUT_SECS` | read timeout of notice requests, default 20 |
    /// | `JARVIS_HOUSING__REFERENCE_RATE` | `housing_budget`'s loan rate in %, default 4 |
    ///
    /// A live source without its key or feed still builds: its look-ups
    /// answer with what is missing.
    pub fn from_env(home: &Path) -> Result<Self, HousingError> {
        Self::from_vars(home, |name| std::env::var(name).ok())
    }

    /// [`HousingConfig::from_env`] over any variable lookup (for tests).
    pub fn from_vars(home: &Path, var: impl Fn(&str) -> Option<String>) -> Result<Self, HousingError> {
        let get = |name: &str| var(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let mut config = match get(HOUSING_MODE_ENV).as_deref() {
            None | Some("live") => Self::live(home, &get)?,
            Some("fixture") => Self::fixture(home),
            Some(other) => {
                return Err(HousingError::Invalid(format!(
                    "{HOUSING_MODE_ENV} must be `live` or `fixture`, got {other:?}"
                )));
            }
        };
        if let Some(every) = get(HOUSING_WATCH_EVERY_ENV) {
            config.watch_every = every
                .parse::<u64>()
                .ok()
                .map(Duration::from_secs)
                .filter(|d| (jarvis_sdk::initiative::MIN_INTERVAL..=Duration::from_secs(86_400)).contains(d))
                .ok_or_else(|| {
                    HousingError::Invalid(format!(
                        "{HOUSING_WATCH_EVERY_ENV} must be whole seconds from 60 to 86400, got {every:?}"
                    ))
                })?;
        }
        if let Some(rate) = get(HOUSING_REFERENCE_RATE_ENV) {
            config.reference_rate_percent = rate
                .parse::<f64>()
                .ok()
                .filter(|r| r.is_finite() && (0.0..=100.0).contains(r))
                .ok_or_else(|| {
                    HousingError::Invalid(format!(
                        "{HOUSING_REFERENCE_RATE_ENV} must be a rate from 0 to 100, got {rate:?}"
                    ))
                })?;
        }
        Ok(config)
    }

    fn live(home: &Path, get: &dyn Fn(&str) -> Option<String>) -> Result<Self, HousingError> {
        let timeout = match get(HOUSING_TIMEOUT_ENV) {
            None => Duration::from_secs(20),
            Some(secs) => secs
                .parse::<u64>()
                .ok()
                .filter(|s| (1..=600).contains(s))
                .map(Duration::from_secs)
                .ok_or_else(|| {
                    HousingError::Invalid(format!(
                        "{HOUSING_TIMEOUT_ENV} must be whole seconds from 1 to 600, got {secs:?}"
                    ))
                })?,
        };
        let sh: Arc<dyn NoticeSource> = match get(SH_URL_ENV) {
            None => Arc::new(ShNoticeSource::unconfigured()),
            Some(location) => Arc::new(Self::sh_source(ShFeed::parse(&location), timeout)?),
        };
        Ok(Self {
            lh: Self::lh_source(get, timeout)?,
            sh,
            profiles: Arc::new(FileProfileStore::in_home(home)),
            watches: Arc::new(FileWatchStore::in_home(home)),
            reference_rate_percent: DEFAULT_REFERENCE_RATE,
            watch_every: job::DEFAULT_WATCH_INTERVAL,
        })
    }

    fn lh_source(
        get: &dyn Fn(&str) -> Option<String>,
        timeout: Duration,
    ) -> Result<Arc<dyn NoticeSource>, HousingError> {
        let mut config = LhConfig::new(get(LH_SERVICE_KEY_ENV).map(jarvis_sdk::model::ApiKey::new));
        if let Some(base) = get(LH_BASE_URL_ENV) {
            config = config.with_base_url(base);
        }
        config.http.read_timeout = timeout;
        Ok(Arc::new(LhNoticeSource::new(config)?))
    }

    fn sh_source(feed: ShFeed, timeout: Duration) -> Result<ShNoticeSource, HousingError> {
        let http = jarvis_sdk::model::HttpSettings {
            read_timeout: timeout,
            ..jarvis_sdk::model::HttpSettings::default()
        };
        Ok(ShNoticeSource::with_http(feed, http)?)
    }
}

/// Where the pack's configuration comes from.
#[derive(Debug, Clone)]
enum Settings {
    /// `JARVIS_HOUSING__*` when the app is built; the samples in the demo.
    Env,
    /// The bundled samples, with file stores in the app's home.
    Fixture,
    /// A configuration given in code.
    Given(HousingConfig),
}

/// The housing pack; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct HousingPack {
    settings: Settings,
}

impl HousingPack {
    /// Sources and stores from `JARVIS_HOUSING__*` ([`HousingConfig::from_env`])
    /// when the app is built, with file stores in its home. While the
    /// offline demo plays and no housing source is configured, the bundled
    /// sample notices (each marked as a sample) stand in for LH and SH; a
    /// model found at start ends the demo, and the configured sources serve.
    pub fn from_env() -> Self {
        Self {
            settings: Settings::Env,
        }
    }

    /// The bundled sample notices, with file stores in the app's home.
    pub fn fixture() -> Self {
        Self {
            settings: Settings::Fixture,
        }
    }

    /// Sample notices and in-memory stores ([`HousingConfig::in_memory`]):
    /// tests and apps that keep nothing.
    pub fn in_memory() -> Self {
        Self::with_config(HousingConfig::in_memory())
    }

    /// Exactly `config`.
    pub fn with_config(config: HousingConfig) -> Self {
        Self {
            settings: Settings::Given(config),
        }
    }

    /// The configuration for an app built with `cx`.
    pub fn config(&self, cx: &PackContext<'_>) -> Result<HousingConfig, HousingError> {
        match &self.settings {
            Settings::Given(config) => Ok(config.clone()),
            Settings::Fixture => Ok(HousingConfig::fixture(cx.home)),
            Settings::Env => {
                let configured = [HOUSING_MODE_ENV, SH_URL_ENV, "JARVIS_HOUSING__LH_SERVICE_KEY"]
                    .iter()
                    .any(|name| (cx.env)(name).is_some_and(|v| !v.trim().is_empty()));
                if cx.demo && !configured {
                    HousingConfig::from_vars(cx.home, |name| {
                        if name == HOUSING_MODE_ENV {
                            Some("fixture".to_owned())
                        } else {
                            (cx.env)(name)
                        }
                    })
                } else {
                    HousingConfig::from_vars(cx.home, cx.env)
                }
            }
        }
    }
}

impl Pack for HousingPack {
    fn name(&self) -> &str {
        "housing"
    }

    fn team_files(&self) -> Vec<(&'static str, &'static str)> {
        vec![("karen.yaml", KAREN_DEFINITION)]
    }

    fn build(&self, cx: &PackContext<'_>) -> Result<PackParts, String> {
        let config = self.config(cx).map_err(|e| e.to_string())?;
        let sources = vec![config.lh.clone(), config.sh.clone()];
        Ok(PackParts::new()
            .with_tools(housing_tools(&config))
            .with_job(Arc::new(WatchJob::from_housing(&config, cx.sink.clone())))
            .with_source_kind(Arc::new(HousingSourceKind::new(sources))))
    }
}

/// The six housing tools over `config`, in the order of [`HOUSING_TOOLS`].
pub fn housing_tools(config: &HousingConfig) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Typed::new(NoticeTool::lh(config.lh.clone()))),
        Arc::new(Typed::new(NoticeTool::sh(config.sh.clone()))),
        Arc::new(Typed::new(HousingLoanTool)),
        Arc::new(Typed::new(
            HousingBudgetTool::new(
                vec![config.lh.clone(), config.sh.clone()],
                config.profiles.clone(),
            )
            .with_reference_rate(config.reference_rate_percent),
        )),
        Arc::new(Typed::new(HousingProfileTool::new(config.profiles.clone()))),
        Arc::new(Typed::new(HousingWatchTool::new(config.watches.clone()))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_are_the_agent_only_names_in_order() {
        let tools = housing_tools(&HousingConfig::in_memory());
        let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
        assert_eq!(names, HOUSING_TOOLS);
        let asks: Vec<&str> = tools
            .iter()
            .filter(|t| t.requires_approval())
            .map(|t| t.name())
            .collect();
        assert_eq!(asks, ["housing_watch"]);
        assert!(
            tools.iter().all(|t| t.agent_only()),
            "every housing tool is agent-only"
        );
        for tool in &tools {
            assert_eq!(tool.parameters()["type"], "object", "{}", tool.name());
        }
    }
}
