//! External sources: feeds, JSON APIs and web pages watched on a schedule,
//! their new items reported once to an agent (feature `sources`).
//!
//! One file per source, `$JARVIS_HOME/external_sources/<id>.yaml`:
//!
//! ```yaml
//! kind: feed              # feed (RSS or Atom) | json | page
//! url: http://127.0.0.1:9000/feed.xml
//! agent: karen            # whose default session hears about new items
//! every: 30m              # or cron: "0 9 * * *", as in schedules
//! filter: "청약|공고"      # optional regex on title and summary
//! report_existing: false  # the first check reports what is there (default: records it as seen)
//! # kind: json → json: {items: "$.data[*]", id: "id", title: "title", link: "url", summary: "desc"}
//! # kind: page → page: {selector: "table.board tr", link: "a", title: "td.title"}
//! ```
//!
//! **JSON paths.** `items` starts at `$` and goes down with `.name` (an
//! object member), `[n]` (an array element) and `[*]` (every element);
//! `$.data[*]`, `$.result.list[*]`, `$[*]`. `id`, `title`, `link` and
//! `summary` are member paths inside one item, dot-separated (`meta.id`);
//! numbers are taken as their text. An item without an id or a title is
//! passed over.
//!
//! **Pages.** `selector` is a CSS selector for one item; `link` a CSS
//! selector inside it whose first match's `href`, made absolute against the
//! page's address, is the item's id; `title` (optional) a CSS selector whose
//! text is the title, else the link's text.
//!
//! **Once.** Each source is a built-in job `source-<id>` on the scheduler
//! (its slots, ledger and catch-up rule). A check fetches the source, keeps
//! the items the filter lets through, and reports the ones not seen yet in
//! one proactive message to `default-<agent>` (queued in the outbox, so
//! recorded exactly once), then records them as seen in
//! `$JARVIS_HOME/external_seen.jsonl`, one line each:
//! `{"v":1,"source":"<source id>","key":"<item id>","at"}`. A crash between
//! the report and the record builds the same message again (its id comes
//! from the source and the items), which the outbox and the session record
//! only once. The first check of a source records what is there without
//! reporting it (a baseline, marked by a line with an empty `key`) unless
//! `report_existing: true`. Lines of other writers (a pack's own watches)
//! are left alone.
//!
//! **Kinds from packs.** A `Pack` (the assembly layer's plug point) may add kinds of its
//! own ([`SourceType`]): `kind: <its name>`, no `url`, and its settings in a
//! member named like the kind (`<name>: {…}`), read by the pack; its items
//! then go through the same filter, baseline, report and record.
//!
//! **Failures.** A source that cannot be fetched or parsed is logged, shown
//! as failing on the AGENDA, and skipped for 1, 2, 4 … up to 16 of its slots
//! before the next try. A file that cannot be read is skipped at start with
//! a log line naming it.

use async_trait::async_trait;
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::schedule::{BuiltinJob, CatchUp, Job, JobOrigin, JobOutput, Trigger};
use jarvis_common::{Clock, TimeZone, Timestamp};

/// The directory of source files under `JARVIS_HOME`.
pub const SOURCES_DIR: &str = "external_sources";
/// The record of reported items under `JARVIS_HOME`.
pub const SEEN_FILE: &str = "external_seen.jsonl";
/// The prefix of a source's job id.
pub const SOURCE_JOB_PREFIX: &str = "source-";
/// The most a source's answer may weigh.
const MAX_BODY_BYTES: usize = 8 << 20;
/// How long a fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// Items one report lists at most (the rest are counted).
const REPORT_ITEMS: usize = 10;
/// The most slots a failing source is skipped for.
const MAX_SKIPPED_SLOTS: u32 = 16;

/// The kinds of source fetched over HTTP by the SDK itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// RSS or Atom.
    Feed,
    /// A JSON document.
    Json,
    /// An HTML page.
    Page,
}

impl SourceKind {
    /// The built-in kind named `name` (`feed`, `json`, `page`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "feed" => Some(Self::Feed),
            "json" => Some(Self::Json),
            "page" => Some(Self::Page),
            _ => None,
        }
    }
}

/// A kind of source a pack adds: `kind: <name>` in a source file, with the
/// pack's settings in the file's member `<name>`.
pub trait SourceType: Send + Sync + std::fmt::Debug {
    /// The `kind:` it answers to; never `feed`, `json` or `page`.
    fn kind(&self) -> &str;
    /// Checks `settings` (the file's `<kind>` member; null when absent) and
    /// answers what reads the source's items; an error says what is wrong.
    fn open(&self, settings: &serde_yaml::Value) -> Result<Arc<dyn SourceReader>, String>;
}

/// Reads the current items of one source of a pack's kind.
#[async_trait]
pub trait SourceReader: Send + Sync + std::fmt::Debug {
    /// Every item there is now, in the source's order; an error counts as a
    /// failed check (retried with backoff, shown on the AGENDA).
    async fn items(&self) -> Result<Vec<SourceItem>, String>;
}

/// Where the items of a JSON source are.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonShape {
    /// The path to the items (`$.data[*]`).
    pub items: String,
    /// The item's id member.
    pub id: String,
    /// The item's title member.
    pub title: String,
    /// The item's link member.
    #[serde(default)]
    pub link: Option<String>,
    /// The item's summary member.
    #[serde(default)]
    pub summary: Option<String>,
}

/// Where the items of a page source are.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageShape {
    /// The CSS selector of one item.
    pub selector: String,
    /// The CSS selector of the item's link (its `href` is the id).
    pub link: String,
    /// The CSS selector of the item's title.
    #[serde(default)]
    pub title: Option<String>,
}

/// One source file; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceFile {
    /// `feed`, `json`, `page`, or a kind a pack adds.
    pub kind: String,
    /// Where to fetch it (the built-in kinds).
    #[serde(default)]
    pub url: String,
    /// Whose default session hears about new items.
    pub agent: String,
    /// How often (`30m`), unless `cron` is given.
    #[serde(default)]
    pub every: Option<String>,
    /// A cron expression, instead of `every`.
    #[serde(default)]
    pub cron: Option<String>,
    /// A regex on title and summary.
    #[serde(default)]
    pub filter: Option<String>,
    /// Report what the first check finds.
    #[serde(default)]
    pub report_existing: bool,
    /// The JSON shape (`kind: json`).
    #[serde(default)]
    pub json: Option<JsonShape>,
    /// The page shape (`kind: page`).
    #[serde(default)]
    pub page: Option<PageShape>,
}

/// A source checked and ready.
#[derive(Debug, Clone)]
pub struct Source {
    /// The file's name without `.yaml`.
    pub id: String,
    /// The file.
    pub file: SourceFile,
    trigger: Trigger,
    filter: Option<Regex>,
    /// The reader of a pack's kind; `None` for the built-in kinds.
    reader: Option<Arc<dyn SourceReader>>,
}

impl Source {
    /// Reads the source `id` from its YAML (a built-in kind); an error says
    /// what is wrong.
    pub fn parse(id: &str, yaml: &str) -> Result<Self, String> {
        Self::parse_with(id, yaml, &[])
    }

    /// Reads the source `id` from its YAML, of a built-in kind or one of
    /// `kinds`; an error says what is wrong.
    pub fn parse_with(id: &str, yaml: &str, kinds: &[Arc<dyn SourceType>]) -> Result<Self, String> {
        let valid_id = !id.is_empty()
            && id.len() <= 56
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !valid_id {
            return Err(format!(
                "{id:?} is not a source id (a-z, 0-9, '-', '_'; at most 56)"
            ));
        }
        let mut map: serde_yaml::Mapping = serde_yaml::from_str(yaml).map_err(|e| e.to_string())?;
        let kind_name = map
            .get("kind")
            .and_then(serde_yaml::Value::as_str)
            .ok_or("say what the source is: `kind`")?
            .to_owned();
        let builtin = SourceKind::parse(&kind_name);
        let reader = match builtin {
            Some(_) => None,
            None => {
                let kind = kinds.iter().find(|k| k.kind() == kind_name).ok_or_else(|| {
                    let mut known = vec!["feed", "json", "page"];
                    known.extend(kinds.iter().map(|k| k.kind()));
                    format!("kind {kind_name:?} is not one of {}", known.join(", "))
                })?;
                let settings = map.remove(kind_name.as_str()).unwrap_or_default();
                Some(kind.open(&settings).map_err(|e| format!("{kind_name}: {e}"))?)
            }
        };
        let file: SourceFile =
            serde_yaml::from_value(serde_yaml::Value::Mapping(map)).map_err(|e| e.to_string())?;
        match builtin {
            Some(_) if !(file.url.starts_with("http://") || file.url.starts_with("https://")) => {
                return Err(format!("url {:?} is not http(s)", file.url));
            }
            None if !file.url.is_empty() => {
                return Err(format!("a {kind_name} source has no `url`"));
            }
            _ => {}
        }
        let trigger = match (&file.every, &file.cron) {
            (Some(every), None) => Trigger::every(every).map_err(|e| e.to_string())?,
            (None, Some(cron)) => Trigger::cron(cron).map_err(|e| e.to_string())?,
            (None, None) => return Err("say when to check: `every` or `cron`".into()),
            (Some(_), Some(_)) => return Err("`every` and `cron` exclude each other".into()),
        };
        let filter = file
            .filter
            .as_deref()
            .map(|f| Regex::new(f).map_err(|e| format!("filter: {e}")))
            .transpose()?;
        match builtin {
            Some(SourceKind::Json) => {
                let shape = file.json.as_ref().ok_or("a json source needs `json`")?;
                parse_path(&shape.items)?;
            }
            Some(SourceKind::Page) => {
                let shape = file.page.as_ref().ok_or("a page source needs `page`")?;
                for selector in [Some(&shape.selector), Some(&shape.link), shape.title.as_ref()]
                    .into_iter()
                    .flatten()
                {
                    scraper::Selector::parse(selector).map_err(|e| format!("selector {selector:?}: {e}"))?;
                }
            }
            Some(SourceKind::Feed) | None => {}
        }
        Ok(Self {
            id: id.to_owned(),
            file,
            trigger,
            filter,
            reader,
        })
    }

    /// The source's job id, `source-<id>`.
    pub fn job_id(&self) -> String {
        format!("{SOURCE_JOB_PREFIX}{}", self.id)
    }

    /// The items of a fetched `body` of a built-in kind, in the source's
    /// order, filtered.
    pub fn items(&self, body: &[u8]) -> Result<Vec<SourceItem>, String> {
        let items = match SourceKind::parse(&self.file.kind) {
            Some(SourceKind::Feed) => feed_items(body)?,
            Some(SourceKind::Json) => json_items(body, self.file.json.as_ref().ok_or("no json shape")?)?,
            Some(SourceKind::Page) => page_items(
                body,
                &self.file.url,
                self.file.page.as_ref().ok_or("no page shape")?,
            )?,
            None => return Err(format!("a {} source is not fetched over HTTP", self.file.kind)),
        };
        Ok(self.filtered(items))
    }

    /// `items` without repeats and with the filter applied.
    fn filtered(&self, items: Vec<SourceItem>) -> Vec<SourceItem> {
        let mut seen = HashSet::new();
        items
            .into_iter()
            .filter(|i| seen.insert(i.id.clone()))
            .filter(|i| {
                self.filter.as_ref().is_none_or(|f| {
                    f.is_match(&i.title) || i.summary.as_deref().is_some_and(|s| f.is_match(s))
                })
            })
            .collect()
    }

    /// Where the source's items come from, for a report.
    pub fn origin(&self) -> &str {
        if self.file.url.is_empty() {
            &self.file.kind
        } else {
            &self.file.url
        }
    }
}

/// Every source in `home/external_sources/`, by id, of a built-in kind or
/// one of `kinds`; files that cannot be read are skipped with a warning
/// naming them.
pub fn load_sources(home: &Path, kinds: &[Arc<dyn SourceType>]) -> Vec<Source> {
    let dir = home.join(SOURCES_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut sources: Vec<Source> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .filter_map(|path| {
            let id = path.file_stem()?.to_str()?.to_owned();
            let parsed = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|yaml| Source::parse_with(&id, &yaml, kinds));
            match parsed {
                Ok(source) => Some(source),
                Err(reason) => {
                    tracing::warn!(file = %path.display(), %reason, "external source skipped");
                    None
                }
            }
        })
        .collect();
    sources.sort_by(|a, b| a.id.cmp(&b.id));
    sources
}

/// One item of a source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceItem {
    /// What identifies it: the feed entry's id (or link), the JSON id, the
    /// page link made absolute.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Where to read it.
    pub link: Option<String>,
    /// Its summary.
    pub summary: Option<String>,
}

fn feed_items(body: &[u8]) -> Result<Vec<SourceItem>, String> {
    let feed = feed_rs::parser::parse(body).map_err(|e| format!("not a feed: {e}"))?;
    Ok(feed
        .entries
        .into_iter()
        .filter_map(|entry| {
            let link = entry.links.first().map(|l| l.href.clone());
            let id = if entry.id.trim().is_empty() {
                link.clone()?
            } else {
                entry.id.clone()
            };
            let title = entry.title.map(|t| one_line(&t.content)).unwrap_or_default();
            Some(SourceItem {
                id,
                title,
                link,
                summary: entry
                    .summary
                    .map(|s| one_line(&s.content))
                    .filter(|s| !s.is_empty()),
            })
        })
        .collect())
}

/// A step of a JSON path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Member(String),
    Index(usize),
    All,
}

/// `$.data[*]` as steps.
fn parse_path(path: &str) -> Result<Vec<Step>, String> {
    let bad = |why: &str| format!("json path {path:?}: {why}");
    let rest = path
        .trim()
        .strip_prefix('$')
        .ok_or_else(|| bad("it starts with `$`"))?;
    let mut steps = Vec::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' => {
                let mut name = String::new();
                while let Some(&n) = chars.peek() {
                    if n == '.' || n == '[' {
                        break;
                    }
                    name.push(n);
                    chars.next();
                }
                if name.is_empty() {
                    return Err(bad("a `.` needs a member name"));
                }
                steps.push(Step::Member(name));
            }
            '[' => {
                let mut inside = String::new();
                for n in chars.by_ref() {
                    if n == ']' {
                        break;
                    }
                    inside.push(n);
                }
                steps.push(match inside.trim() {
                    "*" => Step::All,
                    n => Step::Index(n.parse().map_err(|_| bad("`[…]` holds `*` or a number"))?),
                });
            }
            _ => return Err(bad("expected `.name`, `[n]` or `[*]`")),
        }
    }
    Ok(steps)
}

/// The values `steps` reach from `root`.
fn select<'a>(root: &'a Value, steps: &[Step]) -> Vec<&'a Value> {
    let mut current = vec![root];
    for step in steps {
        current = current
            .into_iter()
            .flat_map(|v| -> Vec<&Value> {
                match step {
                    Step::Member(name) => v.get(name).into_iter().collect(),
                    Step::Index(i) => v.get(*i).into_iter().collect(),
                    Step::All => match v {
                        Value::Array(items) => items.iter().collect(),
                        Value::Object(members) => members.values().collect(),
                        _ => Vec::new(),
                    },
                }
            })
            .collect();
    }
    current
}

/// A member path (`meta.id`) inside an item, as text.
fn member_text(item: &Value, path: &str) -> Option<String> {
    let mut v = item;
    for part in path.split('.') {
        v = v.get(part)?;
    }
    match v {
        Value::String(s) => Some(one_line(s)),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
    .filter(|s| !s.is_empty())
}

fn json_items(body: &[u8], shape: &JsonShape) -> Result<Vec<SourceItem>, String> {
    let root: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let steps = parse_path(&shape.items)?;
    Ok(select(&root, &steps)
        .into_iter()
        .filter_map(|item| {
            Some(SourceItem {
                id: member_text(item, &shape.id)?,
                title: member_text(item, &shape.title)?,
                link: shape.link.as_deref().and_then(|p| member_text(item, p)),
                summary: shape.summary.as_deref().and_then(|p| member_text(item, p)),
            })
        })
        .collect())
}

fn page_items(body: &[u8], base: &str, shape: &PageShape) -> Result<Vec<SourceItem>, String> {
    let html = String::from_utf8_lossy(body);
    let document = scraper::Html::parse_document(&html);
    let parse = |s: &str| scraper::Selector::parse(s).map_err(|e| format!("selector {s:?}: {e}"));
    let (item, link) = (parse(&shape.selector)?, parse(&shape.link)?);
    let title = shape.title.as_deref().map(parse).transpose()?;
    let base = reqwest::Url::parse(base).map_err(|e| e.to_string())?;
    Ok(document
        .select(&item)
        .filter_map(|row| {
            let anchor = row.select(&link).next()?;
            let href = base.join(anchor.value().attr("href")?.trim()).ok()?;
            let text = |e: scraper::ElementRef<'_>| one_line(&e.text().collect::<String>());
            let title = match &title {
                Some(t) => row.select(t).next().map(text)?,
                None => text(anchor),
            };
            (!title.is_empty()).then(|| SourceItem {
                id: href.to_string(),
                title,
                link: Some(href.to_string()),
                summary: None,
            })
        })
        .collect())
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One line of `external_seen.jsonl` for a source.
#[derive(Debug, Serialize, Deserialize)]
struct SeenLine {
    v: u64,
    source: String,
    key: String,
    at: Timestamp,
}

/// The items each source reported, as `external_seen.jsonl` records them.
#[derive(Debug)]
pub struct SeenStore {
    path: PathBuf,
    /// Source id → keys (`""` marks the baseline). Loaded on first use.
    keys: Mutex<Option<HashMap<String, HashSet<String>>>>,
}

impl SeenStore {
    /// The record in `home/external_seen.jsonl`.
    pub fn new(home: &Path) -> Self {
        Self {
            path: home.join(SEEN_FILE),
            keys: Mutex::new(None),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, HashSet<String>>) -> T) -> T {
        let mut guard = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let keys = guard.get_or_insert_with(|| self.load());
        f(keys)
    }

    fn load(&self) -> HashMap<String, HashSet<String>> {
        let mut keys: HashMap<String, HashSet<String>> = HashMap::new();
        let Ok(bytes) = std::fs::read(&self.path) else {
            return keys;
        };
        for line in bytes.split(|b| *b == b'\n') {
            let Ok(value) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            // Lines of other writers (a pack's watches: `watch_id`) are theirs.
            if value.get("watch_id").is_some() {
                continue;
            }
            if let Ok(seen) = serde_json::from_value::<SeenLine>(value) {
                keys.entry(seen.source).or_default().insert(seen.key);
            }
        }
        keys
    }

    /// Whether `source` was checked before (its baseline is recorded).
    pub fn has_baseline(&self, source: &str) -> bool {
        self.with(|k| k.get(source).is_some_and(|s| s.contains("")))
    }

    /// Whether `key` of `source` was reported.
    pub fn contains(&self, source: &str, key: &str) -> bool {
        self.with(|k| k.get(source).is_some_and(|s| s.contains(key)))
    }

    /// Records `keys` of `source` (those new), one synced append.
    pub fn record(&self, source: &str, keys: &[String], at: Timestamp) -> Result<(), String> {
        self.with(|known| {
            let set = known.entry(source.to_owned()).or_default();
            let fresh: Vec<&String> = keys.iter().filter(|k| !set.contains(*k)).collect();
            if fresh.is_empty() {
                return Ok(());
            }
            let mut bytes = Vec::new();
            // A torn last line stays alone on its own line.
            if ends_torn(&self.path) {
                bytes.push(b'\n');
            }
            for key in &fresh {
                let line = SeenLine {
                    v: 1,
                    source: source.to_owned(),
                    key: (*key).clone(),
                    at,
                };
                bytes.extend(serde_json::to_vec(&line).unwrap_or_default());
                bytes.push(b'\n');
            }
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
            file.write_all(&bytes)
                .and_then(|()| file.sync_data())
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
            set.extend(fresh.into_iter().cloned());
            Ok(())
        })
    }
}

/// Whether the file at `path` ends without a newline: its last byte only
/// is read (a pack's watches may append to the same file).
fn ends_torn(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let mut last = [0u8; 1];
    file.seek(SeekFrom::End(-1)).is_ok() && file.read_exact(&mut last).is_ok() && last[0] != b'\n'
}

/// Tells an agent about a source's new items.
#[async_trait]
pub trait SourceReporter: Send + Sync + std::fmt::Debug {
    /// Reports `items` of `source` (new, in the source's order) under
    /// `message_id`; an error leaves them unrecorded for the next check.
    async fn report(&self, source: &Source, message_id: &str, text: &str) -> Result<(), String>;
}

/// How a source is doing, for the AGENDA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceHealth {
    /// Checks that failed in a row.
    pub failures: u32,
    /// The last failure.
    pub error: Option<String>,
    /// Slots still to skip before the next try.
    pub skip: u32,
}

/// The health of every source, shared by its jobs and the AGENDA.
pub type SourceStatus = Arc<Mutex<BTreeMap<String, SourceHealth>>>;

/// A source as a built-in job of the scheduler.
#[derive(Debug)]
pub struct SourceJob {
    source: Source,
    seen: Arc<SeenStore>,
    reporter: Arc<dyn SourceReporter>,
    clock: Arc<dyn Clock>,
    status: SourceStatus,
    time_zone: TimeZone,
    http: reqwest::Client,
}

impl SourceJob {
    /// The job of `source`.
    pub fn new(
        source: Source,
        seen: Arc<SeenStore>,
        reporter: Arc<dyn SourceReporter>,
        clock: Arc<dyn Clock>,
        status: SourceStatus,
        time_zone: TimeZone,
    ) -> Self {
        Self {
            source,
            seen,
            reporter,
            clock,
            status,
            time_zone,
            http: reqwest::Client::builder()
                .timeout(FETCH_TIMEOUT)
                .build()
                .unwrap_or_default(),
        }
    }

    async fn fetch(&self) -> Result<Vec<u8>, String> {
        let mut response = self
            .http
            .get(&self.source.file.url)
            .send()
            .await
            .map_err(|e| jarvis_common::error_chain(&e))?;
        if !response.status().is_success() {
            return Err(format!("{} answered {}", self.source.file.url, response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| jarvis_common::error_chain(&e))?
        {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(format!("the answer is larger than {MAX_BODY_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// One check: fetch, parse, report what is new, record it. Answers how
    /// many items were reported (or recorded as the baseline).
    pub async fn check(&self) -> Result<String, String> {
        let id = &self.source.id;
        let items = match &self.source.reader {
            Some(reader) => self.source.filtered(reader.items().await?),
            None => self.source.items(&self.fetch().await?)?,
        };
        let now = Timestamp::from_system_time(self.clock.now());
        let baseline = !self.seen.has_baseline(id);
        let fresh: Vec<&SourceItem> = items.iter().filter(|i| !self.seen.contains(id, &i.id)).collect();
        let mut keys: Vec<String> = fresh.iter().map(|i| i.id.clone()).collect();
        if baseline && !self.source.file.report_existing {
            keys.push(String::new());
            self.seen.record(id, &keys, now)?;
            return Ok(format!("baseline: {} items recorded as seen", fresh.len()));
        }
        if !fresh.is_empty() {
            let message_id = format!(
                "source-{id}-{:016x}",
                jarvis_common::fnv1a64(keys.join("\n").as_bytes())
            );
            self.reporter
                .report(&self.source, &message_id, &report_text(id, &fresh))
                .await?;
        }
        if baseline {
            keys.push(String::new());
        }
        self.seen.record(id, &keys, now)?;
        Ok(format!("{} new items reported", fresh.len()))
    }

    fn health(&self) -> SourceHealth {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self.source.id)
            .cloned()
            .unwrap_or_default()
    }

    fn set_health(&self, health: SourceHealth) {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.source.id.clone(), health);
    }
}

/// The words of a report: the items, a few at most.
fn report_text(id: &str, items: &[&SourceItem]) -> String {
    let mut text = format!("새 소식 ({id}): {}건 (new items)", items.len());
    for item in items.iter().take(REPORT_ITEMS) {
        text.push_str(&format!("\n- {}", item.title));
        if let Some(link) = &item.link {
            text.push_str(&format!(" <{link}>"));
        }
    }
    if items.len() > REPORT_ITEMS {
        text.push_str(&format!(
            "\n… 외 {}건 (and {} more)",
            items.len() - REPORT_ITEMS,
            items.len() - REPORT_ITEMS
        ));
    }
    text
}

#[async_trait]
impl BuiltinJob for SourceJob {
    fn job(&self) -> Job {
        Job {
            id: self.source.job_id(),
            agent: self.source.file.agent.clone(),
            prompt: format!("{} 확인 (check {})", self.source.id, self.source.origin()),
            trigger: self.source.trigger.clone(),
            time_zone: self.time_zone.clone(),
            enabled: true,
            catch_up: CatchUp::Latest,
            origin: JobOrigin::BuiltIn,
        }
    }

    async fn run(&self, _slot: Timestamp) -> Result<JobOutput, String> {
        let mut health = self.health();
        if health.skip > 0 {
            health.skip -= 1;
            self.set_health(health.clone());
            return Ok(JobOutput {
                session_id: None,
                text: format!(
                    "failing ({} in a row); next try in {} slots",
                    health.failures,
                    health.skip + 1
                ),
            });
        }
        match self.check().await {
            Ok(text) => {
                self.set_health(SourceHealth::default());
                Ok(JobOutput {
                    session_id: None,
                    text,
                })
            }
            Err(error) => {
                let failures = health.failures + 1;
                tracing::warn!(source = %self.source.id, %error, failures, "external source check failed");
                self.set_health(SourceHealth {
                    failures,
                    error: Some(error.clone()),
                    skip: (1u32 << (failures - 1).min(8)).min(MAX_SKIPPED_SLOTS) - 1,
                });
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_paths_reach_items_and_members() {
        let doc: Value =
            serde_json::json!({"data": [{"id": 1, "t": "a", "m": {"u": "x"}}, {"id": 2, "t": "b"}]});
        let steps = parse_path("$.data[*]").unwrap();
        assert_eq!(select(&doc, &steps).len(), 2);
        assert_eq!(
            select(&doc, &parse_path("$.data[1].t").unwrap()),
            vec![&Value::from("b")]
        );
        assert_eq!(member_text(&doc["data"][0], "m.u").as_deref(), Some("x"));
        assert_eq!(member_text(&doc["data"][0], "id").as_deref(), Some("1"));
        for bad in ["data", "$.", "$[x]", "$data"] {
            assert!(parse_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn source_files_are_checked() {
        let ok =
            "kind: feed\nurl: http://127.0.0.1:9/f.xml\nagent: karen\nevery: 30m\nfilter: \"청약|공고\"\n";
        assert!(Source::parse("lh", ok).is_ok());
        for (id, bad) in [
            ("lh", "kind: feed\nurl: http://x/f\nagent: karen\n"),
            (
                "lh",
                "kind: feed\nurl: file:///etc/passwd\nagent: karen\nevery: 30m\n",
            ),
            ("lh", "kind: json\nurl: http://x/f\nagent: karen\nevery: 30m\n"),
            (
                "lh",
                "kind: page\nurl: http://x/f\nagent: karen\nevery: 30m\npage: {selector: \"tr[\", link: a}\n",
            ),
            (
                "lh",
                "kind: feed\nurl: http://x/f\nagent: karen\nevery: 30m\nfilter: \"(\"\n",
            ),
            ("../x", ok),
        ] {
            assert!(Source::parse(id, bad).is_err(), "{bad}");
        }
    }
}
