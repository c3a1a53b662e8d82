//! Items read from a fetched body: RSS or Atom entries, a JSON document's
//! items by path, and an HTML page's items by CSS selectors.

use serde_json::Value;

use super::{JsonShape, PageShape, SourceItem};

pub(super) fn feed_items(body: &[u8]) -> Result<Vec<SourceItem>, String> {
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
pub(super) enum Step {
    Member(String),
    Index(usize),
    All,
}

/// `$.data[*]` as steps.
pub(super) fn parse_path(path: &str) -> Result<Vec<Step>, String> {
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

pub(super) fn json_items(body: &[u8], shape: &JsonShape) -> Result<Vec<SourceItem>, String> {
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

pub(super) fn page_items(body: &[u8], base: &str, shape: &PageShape) -> Result<Vec<SourceItem>, String> {
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
}
