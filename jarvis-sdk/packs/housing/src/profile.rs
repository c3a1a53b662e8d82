//! `housing_profile`: the person's housing profile (household, income band,
//! homelessness, savings, monthly budget, preferred regions), kept behind
//! the small [`ProfileStore`] trait so it can move into the shared user
//! profile of the memory layer; [`FileProfileStore`] keeps it in
//! `$JARVIS_HOME/housing_profile.json` meanwhile.

use async_trait::async_trait;
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::error::HousingError;
use super::format::won;
use super::store::{FILE_VERSION, read_json, update_json};
use jarvis_sdk::agent::{ToolContext, ToolError, ToolResult, TypedTool};

/// The file name of the profile under `$JARVIS_HOME`.
pub const PROFILE_FILE: &str = "housing_profile.json";

/// Household income as a share of the urban-worker household average
/// monthly income (도시근로자 가구당 월평균소득), the yardstick public-housing
/// notices state their income limits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum IncomeBand {
    /// At most 50 %.
    #[serde(rename = "up_to_50")]
    UpTo50,
    /// At most 70 %.
    #[serde(rename = "up_to_70")]
    UpTo70,
    /// At most 100 %.
    #[serde(rename = "up_to_100")]
    UpTo100,
    /// At most 120 %.
    #[serde(rename = "up_to_120")]
    UpTo120,
    /// At most 150 %.
    #[serde(rename = "up_to_150")]
    UpTo150,
    /// Above 150 %.
    #[serde(rename = "above_150")]
    Above150,
}

impl IncomeBand {
    /// The band in Korean.
    pub fn korean(self) -> &'static str {
        match self {
            IncomeBand::UpTo50 => "도시근로자 월평균소득 50% 이하",
            IncomeBand::UpTo70 => "도시근로자 월평균소득 70% 이하",
            IncomeBand::UpTo100 => "도시근로자 월평균소득 100% 이하",
            IncomeBand::UpTo120 => "도시근로자 월평균소득 120% 이하",
            IncomeBand::UpTo150 => "도시근로자 월평균소득 150% 이하",
            IncomeBand::Above150 => "도시근로자 월평균소득 150% 초과",
        }
    }
}

/// A person's housing situation. Every field is optional; `set` changes
/// only the fields it is given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HousingProfile {
    /// People in the household (세대원 수), 1 to 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub household_size: Option<u32>,
    /// Household income band (소득 구간).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub income_band: Option<IncomeBand>,
    /// Whether no one in the household owns a home (무주택 세대).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homeless: Option<bool>,
    /// Money available for a deposit or down payment, in won (보유 자금).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savings: Option<u64>,
    /// The most the person wants to pay each month (rent or loan), in won.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_budget: Option<u64>,
    /// Regions wanted, most wanted first (`서울`, `경기 성남시`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_regions: Option<Vec<String>>,
    /// Years the housing subscription account has been held (청약통장 가입 기간).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription_years: Option<u32>,
    /// Whether the household is a newlywed couple (신혼부부).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newlywed: Option<bool>,
    /// Anything else worth remembering, in a sentence or two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

const MAX_AMOUNT: u64 = 10_000_000_000_000;

impl HousingProfile {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == HousingProfile::default()
    }

    /// Copies every field `patch` sets over this profile's.
    pub fn merge(&mut self, patch: HousingProfile) {
        macro_rules! take {
            ($($field:ident),*) => { $( if patch.$field.is_some() { self.$field = patch.$field; } )* };
        }
        take!(
            household_size,
            income_band,
            homeless,
            savings,
            monthly_budget,
            preferred_regions,
            subscription_years,
            newlywed,
            notes
        );
    }

    /// Checks every value is in range.
    pub fn validate(&self) -> Result<(), HousingError> {
        let invalid = |m: String| Err(HousingError::Invalid(m));
        if let Some(n) = self.household_size
            && !(1..=20).contains(&n)
        {
            return invalid(format!("household_size must be 1 to 20, got {n}"));
        }
        for (name, amount) in [("savings", self.savings), ("monthly_budget", self.monthly_budget)] {
            if let Some(a) = amount
                && a > MAX_AMOUNT
            {
                return invalid(format!(
                    "{name} must be at most {}, got {a}",
                    won(MAX_AMOUNT as f64)
                ));
            }
        }
        if let Some(y) = self.subscription_years
            && y > 100
        {
            return invalid(format!("subscription_years must be at most 100, got {y}"));
        }
        if let Some(regions) = &self.preferred_regions {
            if regions.len() > 10 {
                return invalid(format!("at most 10 preferred_regions, got {}", regions.len()));
            }
            if regions
                .iter()
                .any(|r| r.trim().is_empty() || r.chars().count() > 50)
            {
                return invalid("each preferred region must be 1 to 50 characters".to_owned());
            }
        }
        if let Some(notes) = &self.notes
            && notes.chars().count() > 1000
        {
            return invalid("notes must be at most 1000 characters".to_owned());
        }
        Ok(())
    }

    /// The profile in Korean, one line per field that is set.
    pub fn to_korean(&self) -> String {
        let yes_no = |b: bool| if b { "예" } else { "아니오" };
        let mut lines = Vec::new();
        if let Some(n) = self.household_size {
            lines.push(format!("- 세대원 수: {n}명"));
        }
        if let Some(band) = self.income_band {
            lines.push(format!("- 소득 구간: {}", band.korean()));
        }
        if let Some(h) = self.homeless {
            lines.push(format!("- 무주택 세대: {}", yes_no(h)));
        }
        if let Some(s) = self.savings {
            lines.push(format!("- 보유 자금: {}", won(s as f64)));
        }
        if let Some(m) = self.monthly_budget {
            lines.push(format!("- 월 부담 한도: {}", won(m as f64)));
        }
        if let Some(regions) = &self.preferred_regions {
            lines.push(format!("- 선호 지역: {}", regions.join(", ")));
        }
        if let Some(y) = self.subscription_years {
            lines.push(format!("- 청약통장 가입 기간: {y}년"));
        }
        if let Some(n) = self.newlywed {
            lines.push(format!("- 신혼부부: {}", yes_no(n)));
        }
        if let Some(notes) = &self.notes {
            lines.push(format!("- 메모: {notes}"));
        }
        if lines.is_empty() {
            return "(비어 있음)".to_owned();
        }
        lines.join("\n")
    }
}

/// Where the housing profile is kept.
pub trait ProfileStore: Send + Sync + fmt::Debug {
    /// The stored profile, or `None` before the first save.
    fn load(&self) -> BoxFuture<'_, Result<Option<HousingProfile>, HousingError>>;
    /// Replaces the stored profile.
    fn save(&self, profile: HousingProfile) -> BoxFuture<'_, Result<(), HousingError>>;

    /// Merges `patch` into the stored profile ([`HousingProfile::merge`])
    /// and saves the result when it is valid; answers what was saved. An
    /// invalid result is [`HousingError::Invalid`] and saves nothing.
    ///
    /// The default loads, merges and saves in three steps; stores that
    /// others may write at the same time do it as one step under a lock, so
    /// two patches at once both land.
    fn merge(&self, patch: HousingProfile) -> BoxFuture<'_, Result<HousingProfile, HousingError>> {
        Box::pin(async move {
            let mut profile = self.load().await?.unwrap_or_default();
            profile.merge(patch);
            profile.validate()?;
            self.save(profile.clone()).await?;
            Ok(profile)
        })
    }
}

/// Keeps the profile in memory (tests, embedding without a home directory).
#[derive(Debug, Default)]
pub struct MemoryProfileStore {
    profile: Mutex<Option<HousingProfile>>,
}

impl MemoryProfileStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ProfileStore for MemoryProfileStore {
    fn load(&self) -> BoxFuture<'_, Result<Option<HousingProfile>, HousingError>> {
        let profile = self.profile.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Box::pin(async move { Ok(profile) })
    }

    fn save(&self, profile: HousingProfile) -> BoxFuture<'_, Result<(), HousingError>> {
        *self.profile.lock().unwrap_or_else(|e| e.into_inner()) = Some(profile);
        Box::pin(async { Ok(()) })
    }

    fn merge(&self, patch: HousingProfile) -> BoxFuture<'_, Result<HousingProfile, HousingError>> {
        let mut stored = self.profile.lock().unwrap_or_else(|e| e.into_inner());
        let mut profile = stored.clone().unwrap_or_default();
        profile.merge(patch);
        let result = profile.validate().map(|()| {
            *stored = Some(profile.clone());
            profile
        });
        Box::pin(async move { result })
    }
}

#[derive(Serialize, Deserialize)]
struct ProfileFile {
    v: u64,
    profile: HousingProfile,
}

/// Keeps the profile in one JSON file (`{"v": 1, "profile": {…}}`),
/// replaced atomically on every save; a [`merge`](ProfileStore::merge)
/// reads and writes it under the file's lock
/// ([`update_file_locked`](jarvis_sdk::common::update_file_locked)), so patches
/// made at the same time, in this process or another, all land.
#[derive(Debug)]
pub struct FileProfileStore {
    path: PathBuf,
    lock: Mutex<()>,
}

impl FileProfileStore {
    /// A store in `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            lock: Mutex::new(()),
        }
    }

    /// A store in `$JARVIS_HOME/housing_profile.json`.
    pub fn in_home(home: &Path) -> Self {
        Self::new(home.join(PROFILE_FILE))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl ProfileStore for FileProfileStore {
    fn load(&self) -> BoxFuture<'_, Result<Option<HousingProfile>, HousingError>> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let result = read_json::<ProfileFile>(&self.path).map(|f| f.map(|f| f.profile));
        Box::pin(async move { result })
    }

    fn save(&self, profile: HousingProfile) -> BoxFuture<'_, Result<(), HousingError>> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let result = update_json(&self.path, |_: Option<ProfileFile>| {
            Ok((
                ProfileFile {
                    v: FILE_VERSION,
                    profile,
                },
                (),
            ))
        });
        Box::pin(async move { result })
    }

    fn merge(&self, patch: HousingProfile) -> BoxFuture<'_, Result<HousingProfile, HousingError>> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let result = update_json(&self.path, |stored: Option<ProfileFile>| {
            let mut profile = stored.map(|f| f.profile).unwrap_or_default();
            profile.merge(patch);
            profile.validate()?;
            Ok((
                ProfileFile {
                    v: FILE_VERSION,
                    profile: profile.clone(),
                },
                profile,
            ))
        });
        Box::pin(async move { result })
    }
}

/// What `housing_profile` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProfileAction {
    /// Show the stored profile.
    Get,
    /// Change the fields given in `profile`.
    Set,
}

/// Arguments of `housing_profile`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct HousingProfileArgs {
    /// `get` shows the profile; `set` changes the fields given in `profile`.
    pub action: ProfileAction,
    /// For `set`: the fields to change; fields left out keep their value.
    #[serde(default)]
    pub profile: Option<HousingProfile>,
}

/// `housing_profile {action: get | set, profile?}`.
#[derive(Debug, Clone)]
pub struct HousingProfileTool {
    store: Arc<dyn ProfileStore>,
}

impl HousingProfileTool {
    /// The tool over `store`.
    pub fn new(store: Arc<dyn ProfileStore>) -> Self {
        Self { store }
    }
}

#[async_trait]
impl TypedTool for HousingProfileTool {
    type Args = HousingProfileArgs;

    fn name(&self) -> &str {
        "housing_profile"
    }

    /// One agent's domain: only agents that list it have it.
    fn agent_only(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "Reads or updates the person's housing profile (주거 프로필): household size, income band, \
         homelessness (무주택), savings and monthly budget in won, preferred regions, years of the \
         subscription account, newlywed status, notes. `action: get` shows it; `action: set` with \
         `profile` changes only the fields given. Use it before recommending notices."
    }

    async fn run(&self, args: HousingProfileArgs, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let stored = match self.store.load().await {
            Ok(stored) => stored,
            Err(e) => return Ok(ToolResult::error(format!("주거 프로필을 읽지 못했습니다: {e}"))),
        };
        match (args.action, args.profile) {
            (ProfileAction::Get, Some(_)) => Ok(ToolResult::error(
                "`profile` is only for `action: set`; call `get` without it (조회에는 profile을 넣지 않습니다)",
            )),
            (ProfileAction::Get, None) => Ok(ToolResult::ok(match stored {
                Some(p) if !p.is_empty() => format!("저장된 주거 프로필:\n{}", p.to_korean()),
                _ => "저장된 주거 프로필이 아직 없습니다 (no housing profile yet). \
                      `housing_profile {action: set, profile: {...}}`로 저장할 수 있습니다."
                    .to_owned(),
            })),
            (ProfileAction::Set, None) => Ok(ToolResult::error(
                "`action: set` needs `profile` with the fields to change (변경할 항목을 profile에 넣어 주세요)",
            )),
            (ProfileAction::Set, Some(patch)) => match self.store.merge(patch).await {
                Ok(profile) => Ok(ToolResult::ok(format!(
                    "주거 프로필을 저장했습니다:\n{}",
                    profile.to_korean()
                ))),
                Err(e @ HousingError::Invalid(_)) => Ok(ToolResult::error(e.to_string())),
                Err(e) => Ok(ToolResult::error(format!(
                    "주거 프로필을 저장하지 못했습니다: {e}"
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_changes_only_given_fields() {
        let mut p = HousingProfile {
            household_size: Some(2),
            savings: Some(10),
            ..HousingProfile::default()
        };
        p.merge(HousingProfile {
            savings: Some(20),
            preferred_regions: Some(vec!["서울".into()]),
            ..HousingProfile::default()
        });
        assert_eq!(p.household_size, Some(2));
        assert_eq!(p.savings, Some(20));
        assert_eq!(p.preferred_regions, Some(vec!["서울".to_owned()]));
    }

    #[test]
    fn validation_names_the_field() {
        let bad = [
            (
                HousingProfile {
                    household_size: Some(0),
                    ..Default::default()
                },
                "household_size",
            ),
            (
                HousingProfile {
                    savings: Some(MAX_AMOUNT + 1),
                    ..Default::default()
                },
                "savings",
            ),
            (
                HousingProfile {
                    preferred_regions: Some(vec![" ".into()]),
                    ..Default::default()
                },
                "region",
            ),
            (
                HousingProfile {
                    subscription_years: Some(101),
                    ..Default::default()
                },
                "subscription_years",
            ),
        ];
        for (profile, field) in bad {
            let err = profile.validate().unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
        }
        assert!(HousingProfile::default().validate().is_ok());
    }

    #[test]
    fn unknown_fields_and_bands_are_refused() {
        assert!(serde_json::from_str::<HousingProfile>(r#"{"househod_size": 2}"#).is_err());
        assert!(serde_json::from_str::<HousingProfile>(r#"{"income_band": "rich"}"#).is_err());
        let p: HousingProfile = serde_json::from_str(r#"{"income_band": "up_to_100"}"#).unwrap();
        assert_eq!(p.income_band, Some(IncomeBand::UpTo100));
    }
}
