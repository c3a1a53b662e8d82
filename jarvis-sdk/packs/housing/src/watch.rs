//! `housing_watch`: watches on new notices. The tool only registers a watch
//! (idempotently: the same region and keyword twice are one watch); the
//! scheduler's built-in watch job (`WatchJob`) looks for each watch of
//! [`WatchStore::list`] in each source ([`new_notices`]), tells the person
//! what is new and then records it as reported ([`WatchStore::mark_seen`]).
//!
//! What was reported is kept apart from the watches: the file store appends
//! it to `$JARVIS_HOME/external_seen.jsonl` (SPEC.md §9.1), one line per
//! notice, so a restart reports nothing again.

use async_trait::async_trait;
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use super::error::HousingError;
use super::format::notice_list;
use super::notice::{MAX_NOTICE_LIMIT, Notice, NoticeQuery, NoticeSource};
use super::store::{EXTERNAL_SEEN_FILE, FILE_VERSION, SeenLog, read_json, update_json};
use jarvis_sdk::agent::{ToolContext, ToolError, ToolResult, TypedTool};
use jarvis_sdk::common::{Clock, SystemClock, Timestamp};

/// The file name of the watches under `$JARVIS_HOME`.
pub const WATCHES_FILE: &str = "housing_watches.json";
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
}

impl NoticeWatch {
    /// The id of a watch on `region` and `keyword` (normalised as
    /// [`normalize_watch_text`] does): `w-` and 16 hex digits of an FNV-1a
    /// hash, stable across runs and platforms.
    pub fn id_for(region: Option<&str>, keyword: Option<&str>) -> String {
        let text = format!("{}\u{1f}{}", region.unwrap_or(""), keyword.unwrap_or(""));
        format!("w-{:016x}", jarvis_sdk::common::fnv1a64(text.as_bytes()))
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

/// Where watches are kept, and which notices each has already reported.
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
    /// The keys ([`Notice::key`]) of the notices already reported for watch `id`.
    fn seen(&self, id: &str) -> BoxFuture<'_, Result<HashSet<String>, HousingError>>;
    /// Records `keys` as reported for watch `id` (an error when there is no
    /// such watch).
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
        };
        self.watches.push(watch.clone());
        WatchAdded { watch, created: true }
    }

    fn check_exists(&self, id: &str) -> Result<(), HousingError> {
        if self.watches.iter().any(|w| w.id == id) {
            Ok(())
        } else {
            Err(HousingError::Invalid(format!("no watch with id {id}")))
        }
    }
}

fn unix_seconds(clock: &dyn Clock) -> u64 {
    clock.now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Keeps watches, and what they reported, in memory.
#[derive(Debug)]
pub struct MemoryWatchStore {
    watches: Mutex<Watches>,
    seen: Mutex<HashMap<String, HashSet<String>>>,
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
            seen: Mutex::new(HashMap::new()),
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

    fn seen(&self, id: &str) -> BoxFuture<'_, Result<HashSet<String>, HousingError>> {
        let keys = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .unwrap_or_default();
        Box::pin(async move { Ok(keys) })
    }

    fn mark_seen(&self, id: &str, keys: Vec<String>) -> BoxFuture<'_, Result<(), HousingError>> {
        let result = self.lock().check_exists(id).map(|()| {
            self.seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(id.to_owned())
                .or_default()
                .extend(keys);
        });
        Box::pin(async move { result })
    }
}

/// Keeps watches in one JSON file (`{"v": 1, "watches": […]}`), read and
/// replaced atomically on every change, and what they reported in the
/// append-only `external_seen.jsonl` beside it (read once, then kept in
/// memory and appended to).
#[derive(Debug)]
pub struct FileWatchStore {
    path: PathBuf,
    seen_path: PathBuf,
    lock: Mutex<()>,
    seen: Mutex<Option<SeenLog>>,
    clock: Arc<dyn Clock>,
}

impl FileWatchStore {
    /// A store in `path`, with `external_seen.jsonl` in the same directory,
    /// on the system clock.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        Self {
            seen_path: path.with_file_name(EXTERNAL_SEEN_FILE),
            path,
            lock: Mutex::new(()),
            seen: Mutex::new(None),
            clock: Arc::new(SystemClock),
        }
    }

    /// A store in `$JARVIS_HOME/housing_watches.json` and
    /// `$JARVIS_HOME/external_seen.jsonl`.
    pub fn in_home(home: &Path) -> Self {
        Self::new(home.join(WATCHES_FILE))
    }

    /// The log of reported notices (`external_seen.jsonl`).
    pub fn seen_path(&self) -> &Path {
        &self.seen_path
    }

    /// Runs `f` on the seen log, reading the file the first time.
    fn with_seen<T>(
        &self,
        f: impl FnOnce(&mut SeenLog) -> Result<T, HousingError>,
    ) -> Result<T, HousingError> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let log = match &mut *seen {
            Some(log) => log,
            empty => empty.insert(SeenLog::load(&self.seen_path)?),
        };
        f(log)
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

    /// Reads, changes and writes back under the store's lock and the
    /// file's ([`update_json`]: also against another process).
    fn update<T>(
        &self,
        change: impl FnOnce(&mut Watches) -> Result<T, HousingError>,
    ) -> Result<T, HousingError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        update_json(&self.path, |stored: Option<Watches>| {
            let mut watches = stored.unwrap_or(Watches {
                v: FILE_VERSION,
                watches: Vec::new(),
            });
            let out = change(&mut watches)?;
            watches.v = FILE_VERSION;
            Ok((watches, out))
        })
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

    fn seen(&self, id: &str) -> BoxFuture<'_, Result<HashSet<String>, HousingError>> {
        let result = self.with_seen(|log| Ok(log.keys(id)));
        Box::pin(async move { result })
    }

    fn mark_seen(&self, id: &str, keys: Vec<String>) -> BoxFuture<'_, Result<(), HousingError>> {
        let at = Timestamp::from(self.clock.now());
        let result = {
            let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.read().and_then(|w| w.check_exists(id))
        }
        .and_then(|()| self.with_seen(|log| log.append(&self.seen_path, id, keys, at)));
        Box::pin(async move { result })
    }
}

/// The notices of `source` matching watch `id` that it has not reported
/// yet, newest first, **without** recording them: the caller reports them
/// and then calls [`WatchStore::mark_seen`], so a report that fails is
/// tried again. The first look of a watch finds every matching notice the
/// source lists (at most [`MAX_NOTICE_LIMIT`]).
pub async fn new_notices(
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
    let seen = store.seen(id).await?;
    let found = source.fetch(watch.query()).await?;
    Ok(found.into_iter().filter(|n| !seen.contains(&n.key())).collect())
}

/// [`new_notices`], then records them as reported at once.
pub async fn check_watch(
    store: &dyn WatchStore,
    id: &str,
    source: &dyn NoticeSource,
) -> Result<Vec<Notice>, HousingError> {
    let new = new_notices(store, id, source).await?;
    if !new.is_empty() {
        store.mark_seen(id, new.iter().map(Notice::key).collect()).await?;
    }
    Ok(new)
}

/// The message telling the person about `notices`, new for `watch`: a
/// line naming the watch, then the notices as the look-up tools list them
/// (samples marked as such).
pub fn watch_report(watch: &NoticeWatch, notices: &[Notice]) -> String {
    let mut agencies: Vec<&str> = notices.iter().map(|n| n.source.as_str()).collect();
    agencies.sort_unstable();
    agencies.dedup();
    format!(
        "새 공고 알림 (new notices for watch {}, {}):\n{}",
        watch.id,
        watch.describe(),
        notice_list(&agencies.join("·"), &watch.query(), notices)
    )
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

    /// One agent's domain: only agents that list it have it.
    fn agent_only(&self) -> bool {
        true
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

    #[tokio::test]
    async fn seen_keys_go_to_the_log_and_survive_a_reopen() {
        let dir = std::env::temp_dir().join(format!("jarvis-watch-seen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = FileWatchStore::in_home(&dir);
        let id = store.add(None, None).await.unwrap().watch.id;
        store
            .mark_seen(&id, vec!["LH:1".into(), "LH:1".into()])
            .await
            .unwrap();
        store
            .mark_seen(&id, vec!["LH:1".into(), "SH:2".into()])
            .await
            .unwrap();
        assert!(store.mark_seen("w-nope", vec!["LH:3".into()]).await.is_err());
        let log = std::fs::read_to_string(store.seen_path()).unwrap();
        assert_eq!(log.lines().count(), 2, "each key once: {log}");
        assert!(!std::fs::read_to_string(store.path()).unwrap().contains("LH:1"));
        let reopened = FileWatchStore::in_home(&dir);
        let seen = reopened.seen(&id).await.unwrap();
        assert_eq!(seen, HashSet::from(["LH:1".to_owned(), "SH:2".to_owned()]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn the_memory_store_refuses_unknown_watches() {
        let store = MemoryWatchStore::new();
        let id = store.add(Some("서울".into()), None).await.unwrap().watch.id;
        store.mark_seen(&id, vec!["SH:1".into()]).await.unwrap();
        assert!(store.seen(&id).await.unwrap().contains("SH:1"));
        assert!(store.mark_seen("w-nope", vec![]).await.is_err());
    }
}
