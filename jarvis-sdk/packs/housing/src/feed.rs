//! The notice feed format: what an SH feed (and the bundled samples) hold.
//!
//! A JSON object with a `notices` list, or the list alone. Each notice:
//!
//! ```json
//! {
//!   "id": "2025-0512-01",              // required, unique within the feed
//!   "title": "서울 강서구 행복주택 입주자 모집 공고",   // required
//!   "kind": "행복주택",
//!   "region": "서울특별시 강서구",
//!   "posted": "2025-05-12",            // YYYY-MM-DD, YYYY.MM.DD or YYYYMMDD
//!   "closes": "2025-05-23",
//!   "status": "접수중",
//!   "url": "https://…",
//!   "deposit": 21000000,               // optional amounts in won
//!   "monthly_rent": 98000,
//!   "price": null
//! }
//! ```
//!
//! Unknown members are ignored, so a feed may carry more.

use serde::Deserialize;

use super::error::NoticeError;
use super::notice::{Notice, NoticeAgency, normalize_date};

#[derive(Deserialize)]
#[serde(untagged)]
enum Feed {
    Wrapped { notices: Vec<serde_json::Value> },
    Bare(Vec<serde_json::Value>),
}

#[derive(Deserialize)]
struct FeedNotice {
    id: String,
    title: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    region: String,
    #[serde(default)]
    posted: Option<String>,
    #[serde(default)]
    closes: Option<String>,
    #[serde(default)]
    status: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    deposit: Option<u64>,
    #[serde(default)]
    monthly_rent: Option<u64>,
    #[serde(default)]
    price: Option<u64>,
}

/// The notices of a feed, published by `agency`; `service` names the
/// source in errors.
pub(crate) fn parse_feed(
    bytes: &[u8],
    agency: NoticeAgency,
    service: &str,
) -> Result<Vec<Notice>, NoticeError> {
    let feed: Feed = serde_json::from_slice(bytes).map_err(|e| {
        NoticeError::malformed(
            service,
            format!(
                "expected a JSON object with a `notices` list or a list of notices ({e}): {}",
                excerpt(bytes)
            ),
        )
    })?;
    let items = match feed {
        Feed::Wrapped { notices } | Feed::Bare(notices) => notices,
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let n: FeedNotice = serde_json::from_value(item)
                .map_err(|e| NoticeError::malformed(service, format!("notice {i}: {e}")))?;
            if n.id.trim().is_empty() || n.title.trim().is_empty() {
                return Err(NoticeError::malformed(
                    service,
                    format!("notice {i}: `id` and `title` must not be empty"),
                ));
            }
            Ok(Notice {
                id: n.id.trim().to_owned(),
                title: n.title.trim().to_owned(),
                kind: n.kind,
                region: n.region,
                posted: n.posted.as_deref().and_then(normalize_date),
                closes: n.closes.as_deref().and_then(normalize_date),
                status: n.status,
                url: n.url.filter(|u| !u.trim().is_empty()),
                source: agency,
                deposit: n.deposit,
                monthly_rent: n.monthly_rent,
                price: n.price,
                sample: false,
            })
        })
        .collect()
}

/// The start of a body, for error messages.
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return "(empty body)".to_owned();
    }
    jarvis_sdk::common::truncate_with_marker(&collapsed, 160)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_and_bare_feeds_parse() {
        let wrapped = br#"{"notices": [{"id": "1", "title": "t", "posted": "2025.05.12", "extra": 1}]}"#;
        let bare = br#"[{"id": "1", "title": "t", "posted": "20250512"}]"#;
        for body in [&wrapped[..], &bare[..]] {
            let got = parse_feed(body, NoticeAgency::Sh, "sh").unwrap();
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].posted.as_deref(), Some("2025-05-12"));
            assert_eq!(got[0].source, NoticeAgency::Sh);
        }
    }

    #[test]
    fn bad_feeds_are_malformed_errors() {
        for body in [
            &b"<html>SH</html>"[..],
            br#"{"items": []}"#,
            br#"[{"id": "1"}]"#,
            br#"[{"id": " ", "title": "t"}]"#,
            br#"[{"id": "1", "title": "t", "deposit": -5}]"#,
        ] {
            let err = parse_feed(body, NoticeAgency::Sh, "sh").unwrap_err();
            assert!(matches!(err, NoticeError::Malformed { .. }), "{err}");
            assert!(
                err.to_string().starts_with("sh notice answer is malformed"),
                "{err}"
            );
        }
    }
}
