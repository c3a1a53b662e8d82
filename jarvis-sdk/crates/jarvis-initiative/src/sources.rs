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

mod items;
mod job;
mod seen;

use async_trait::async_trait;
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use super::schedule::Trigger;
use items::{feed_items, json_items, page_items, parse_path};
pub use job::{SourceHealth, SourceJob, SourceReporter, SourceStatus};
pub use seen::SeenStore;

/// The directory of source files under `JARVIS_HOME`.
pub const SOURCES_DIR: &str = "external_sources";
/// The record of reported items under `JARVIS_HOME`.
pub const SEEN_FILE: &str = "external_seen.jsonl";
/// The prefix of a source's job id.
pub const SOURCE_JOB_PREFIX: &str = "source-";

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

#[cfg(test)]
mod tests {
    use super::*;

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
