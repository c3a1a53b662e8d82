//! `housing_watch`: watches on new notices. The tool only registers a watch
//! (idempotently: the same region and keyword twice are one watch); the
//! scheduler, when it exists, calls [`check_watch`] for each watch of
//! [`WatchStore::list`] against each source and tells the person what is
//! new. Nothing is checked until then.

use async_trait::async_trait;
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use super::error::HousingError;
use super::notice::{MAX_NOTICE_LIMIT, Notice, NoticeQuery, NoticeSource};
use super::store::{FILE_VERSION, read_json, write_json};
use crate::agent::{ToolContext, ToolError, ToolResult, TypedTool};
use crate::common::{Clock, SystemClock};

/// The file name of the watches under `$JARVIS_HOME`.
pub const WATCHES_FILE: &str = "housing_watches.json";
/// How many notice keys a watch remembers as seen; the oldest are dropped.
pub const MAX_SEEN: usize = 500;
const MAX_TEXT: usize = 50;

/// A watch on new notices matching a region and a title keyword.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoticeWatch {
    /// Derived from the region and keyword, so equal watches share it.
    pub id: String,
    /// The region to watch, if any.
    pub region: Option<String>,
    /// The title keyword to watch, if any.
    pub keyword: Option<String>,
    /// When it was registered, in seconds since the Unix epoch.
    pub created_at: u64,
    /// Keys (`"LH:<id>"`) of notices already reported, oldest first.
    #[serde(default)]
    pub seen: Vec<String>,
}

impl NoticeWatch {
    /// The id of a watch on `region` and `keyword` (normalised as
    /// [`normalize_watch_text`] does): `w-` and 16 hex digits of an FNV-1a
    /// hash, stable across runs and platforms.
    pub fn id_for(region: Option<&str>, keyword: Option<&str>) -> String {
        let text = format!("{}\u{1f}{}", region.unwrap_or(""), keyword.unwrap_or(""));
        format!("w-{:016x}", crate::common::fnv1a64(text.as_bytes()))
    }

    /// The query this watch runs.
    pub fn query(&self) -> NoticeQuery {
        NoticeQuery {
            region: self.region.clone(),
            keyword: self.keyword.clone(),
            limit: Some(MAX_NOTICE_LIMIT),
        }
    }

    /// The watch's conditions in Korean.
    pub fn describe(&self) -> String {
        format!(
            "지역={}, 키워드={}",
            self.region.as_deref().unwrap_or("전체"),
            self.keyword.as_deref().unwrap_or("전체")
        )
    }
}

/// Trimmed, inner whitespace collapsed; blank is `None`.
pub fn normalize_watch_text(text: Option<&str>) -> Option<String> {
    let joined = text?.split_whitespace().collect::<Vec<_>>().join(" ");
    (!joined.is_empty()).then_some(joined)
}

/// The result of [`WatchStore::add`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchAdded {
    /// The watch, new or existing.
    pub watch: NoticeWatch,
    /// Whether it was created now (false: it already existed).
    pub created: bool,
}

/// Where watches are kept.
pub trait WatchStore: Send + Sync + fmt::Debug {
    /// Every watch, in registration order.
    fn list(&self) -> BoxFuture<'_, Result<Vec<NoticeWatch>, HousingError>>;
    /// Registers a watch on `region` and `keyword` (normalised), or returns
    /// the existing equal one.
    fn add(
        &self,
        region: Option<String>,
        keyword: Option<String>,
    ) -> BoxFuture<'_, Result<WatchAdded, HousingError>>;
    /// Records `keys` as reported for watch `id`.
    fn mark_seen(&self, id: &str, keys: Vec<String>) -> BoxFuture<'_, Result<(), HousingError>>;
}

/// The watches as one list, with the operations both stores share.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Watches {
    v: u64,
    watches: Vec<NoticeWatch>,
}

impl Watches {
    fn add(&mut self, region: Option<String>, keyword: Option<String>, now: u64) -> WatchAdded {
        let region = normalize_watch_text(region.as_deref());
        let keyword = normalize_watch_text(keyword.as_deref());
        let id = NoticeWatch::id_for(region.as_deref(), keyword.as_deref());
        if let Some(existing) = self.watches.iter().find(|w| w.id == id) {
            return WatchAdded {
                watch: existing.clone(),
                created: false,
            };
        }
        let watch = NoticeWatch {
            id,
            region,
            keyword,
            created_at: now,
            seen: Vec::new(),
        };
        self.watches.push(watch.clone());
        WatchAdded { watch, created: true }
    }

    fn mark_seen(&mut self, id: &str, keys: Vec<String>) -> Result<(), HousingError> {
        let watch = self
            .watches
            .iter_mut()
            .find(|w| w.id == id)
            .ok_or_else(|| HousingError::Invalid(format!("no watch with id {id}")))?;
        for key in keys {
            if !watch.seen.contains(&key) {
                watch.seen.push(key);
            }
        }
        let excess = watch.seen.len().saturating_sub(MAX_SEEN);
        watch.seen.drain(..excess);
        Ok(())
    }
}

fn unix_seconds(clock: &dyn Clock) -> u64 {
    clock.now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Keeps watches in memory.
#[derive(Debug)]
pub struct MemoryWatchStore {
    watches: Mutex<Watches>,
    clock: Arc<dyn Clock>,
}

impl Default for MemoryWatchStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryWatchStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self {
            watches: Mutex::new(Watches::default()),
            clock: Arc::new(SystemClock),
        }
    }

    /// Uses `clock` for registration times.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watches> {
        self.watches.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl WatchStore for MemoryWatchStore {
    fn list(&self) -> BoxFuture<'_, Result<Vec<NoticeWatch>, HousingError>> {
        let list = self.lock().watches.clone();
        Box::pin(async move { Ok(list) })
    }

    fn add(
        &self,
        region: Option<String>,
        keyword: Option<String>,
    ) -> BoxFuture<'_, Result<WatchAdded, HousingError>> {
        let added = self
            .lock()
            .add(region, keyword, unix_seconds(self.clock.as_ref()));
        Box::pin(async move { Ok(added) })
    }

    fn mark_seen(&self, id: &str, keys: Vec<String>) -> BoxFuture<'_, Result<(), HousingError>> {
        let result = self.lock().mark_seen(id, keys);
        Box::pin(async move { result })
    }
}

/// Keeps watches in one JSON file (`{"v": 1, "watches": […]}`), read and
/// replaced atomically on every change.
#[derive(Debug)]
pub struct FileWatchStore {
    path: PathBuf,
    lock: Mutex<()>,
    clock: Arc<dyn Clock>,
}

impl FileWatchStore {
    /// A store in `path`, on the system clock.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            lock: Mutex::new(()),
            clock: Arc::new(SystemClock),
        }
    }

    /// A store in `$JARVIS_HOME/housing_watches.json`.
    pub fn in_home(home: &Path) -> Self {
        Self::new(home.join(WATCHES_FILE))
    }

    /// Uses `clock` for registration times.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<Watches, HousingError> {
        Ok(read_json::<Watches>(&self.path)?.unwrap_or(Watches {
            v: FILE_VERSION,
            watches: Vec::new(),
        }))
    }

    /// Reads, changes and writes back under the store's lock.
    fn update<T>(
        &self,
        change: impl FnOnce(&mut Watches) -> Result<T, HousingError>,
    ) -> Result<T, HousingError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut watches = self.read()?;
        let out = change(&mut watches)?;
        watches.v = FILE_VERSION;
        write_json(&self.path, &watches)?;
        Ok(out)
    }
}

impl WatchStore for FileWatchStore {
    fn list(&self) -> BoxFuture<'_, Result<Vec<NoticeWatch>, HousingError>> {
        let result = {
            let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.read().map(|w| w.watches)
        };
        Box::pin(async move { result })
    }

    fn add(
        &self,
        region: Option<String>,
        keyword: Option<String>,
    ) -> BoxFuture<'_, Result<WatchAdded, HousingError>> {
        let now = unix_seconds(self.clock.as_ref());
        let result = self.update(|w| Ok(w.add(region, keyword, now)));
        Box::pin(async move { result })
    }

    fn mark_seen(&self, id: &str, keys: Vec<String>) -> BoxFuture<'_, Result<(), HousingError>> {
        let result = self.update(|w| w.mark_seen(id, keys));
        Box::pin(async move { result })
    }
}

/// The notices of `source` matching watch `id` that it has not reported
/// yet, newest first; they are recorded as reported. The first check of a
/// watch reports every matching notice the source lists (at most
/// [`MAX_NOTICE_LIMIT`]).
pub async fn check_watch(
    store: &dyn WatchStore,
    id: &str,
    source: &dyn NoticeSource,
) -> Result<Vec<Notice>, HousingError> {
    let watch = store
        .list()
        .await?
        .into_iter()
        .find(|w| w.id == id)
        .ok_or_else(|| HousingError::Invalid(format!("no watch with id {id}")))?;
    let found = source.fetch(watch.query()).await?;
    let new: Vec<Notice> = found
        .into_iter()
        .filter(|n| !watch.seen.contains(&n.key()))
        .collect();
    if !new.is_empty() {
        store.mark_seen(id, new.iter().map(Notice::key).collect()).await?;
    }
    Ok(new)
}

/// Arguments of `housing_watch`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct HousingWatchArgs {
    /// The region to watch (`서울`, `경기 성남시`); all regions when absent.
    #[serde(default)]
    pub region: Option<String>,
    /// A word new notice titles must contain (`행복주택`); any title when absent.
    #[serde(default)]
    pub keyword: Option<String>,
}

/// `housing_watch {region?, keyword?}`: registers a watch on new notices.
/// Asks for approval (it sets up something that keeps running).
#[derive(Debug, Clone)]
pub struct HousingWatchTool {
    store: Arc<dyn WatchStore>,
}

impl HousingWatchTool {
    /// The tool over `store`.
    pub fn new(store: Arc<dyn WatchStore>) -> Self {
        Self { store }
    }
}

#[async_trait]
impl TypedTool for HousingWatchTool {
    type Args = HousingWatchArgs;

    fn name(&self) -> &str {
        "housing_watch"
    }

    fn description(&self) -> &str {
        "Registers a watch for new LH/SH housing notices (새 공고 알림) matching a region and/or a title \
         keyword. Registering the same watch twice keeps one. Notifications arrive once the scheduler \
         runs; the tool itself does not search (use lh_notice / sh_notice for that)."
    }

    fn requires_approval(&self) -> bool {
        true
    }

    async fn run(&self, args: HousingWatchArgs, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        for (name, value) in [("region", &args.region), ("keyword", &args.keyword)] {
            if value.as_deref().is_some_and(|v| v.chars().count() > MAX_TEXT) {
                return Ok(ToolResult::error(format!(
                    "{name} must be at most {MAX_TEXT} characters ({name}이(가) 너무 깁니다)"
                )));
            }
        }
        let added = match self.store.add(args.region, args.keyword).await {
            Ok(added) => added,
            Err(e) => return Ok(ToolResult::error(format!("알림을 등록하지 못했습니다: {e}"))),
        };
        let what = added.watch.describe();
        let head = if added.created {
            format!("새 공고 알림을 등록했습니다 (watch {}): {what}.", added.watch.id)
        } else {
            format!(
                "같은 조건의 알림이 이미 있습니다 (watch {}, 새로 만들지 않음): {what}.",
                added.watch.id
            )
        };
        Ok(ToolResult::ok(format!(
            "{head} 알림은 스케줄러가 실행되면 새 공고가 올라올 때 도착합니다 \
             (notifications arrive once the scheduler runs; nothing is checked before that)."
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinguish_region_from_keyword() {
        let a = NoticeWatch::id_for(Some("서울"), None);
        assert_eq!(a, NoticeWatch::id_for(Some("서울"), None));
        assert_ne!(a, NoticeWatch::id_for(None, Some("서울")));
        assert!(a.starts_with("w-") && a.len() == 18, "{a}");
    }

    #[test]
    fn equal_watches_after_normalising_are_one() {
        let mut w = Watches::default();
        assert!(w.add(Some(" 서울  강서구 ".into()), None, 1).created);
        let again = w.add(Some("서울 강서구".into()), Some("  ".into()), 2);
        assert!(!again.created);
        assert_eq!(again.watch.created_at, 1);
        assert_eq!(w.watches.len(), 1);
    }

    #[test]
    fn seen_keys_are_capped() {
        let mut w = Watches::default();
        let id = w.add(None, None, 0).watch.id;
        w.mark_seen(&id, (0..MAX_SEEN + 10).map(|i| i.to_string()).collect())
            .unwrap();
        let seen = &w.watches[0].seen;
        assert_eq!(seen.len(), MAX_SEEN);
        assert_eq!(seen[0], "10");
        assert!(w.mark_seen("w-nope", vec![]).is_err());
    }
}
