//! Notices and where they come from: [`Notice`], [`NoticeQuery`], the
//! [`NoticeSource`] trait, and the filtering every source shares (region
//! names, title keywords, newest first, a limit).

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::fmt;

use super::error::NoticeError;

/// How many notices a look-up returns when no limit is given.
pub const DEFAULT_NOTICE_LIMIT: usize = 5;
/// The most notices one look-up returns.
pub const MAX_NOTICE_LIMIT: usize = 20;

/// Who published a notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NoticeAgency {
    /// Korea Land & Housing Corporation (한국토지주택공사).
    #[serde(rename = "LH")]
    Lh,
    /// Seoul Housing & Communities Corporation (서울주택도시공사).
    #[serde(rename = "SH")]
    Sh,
}

impl NoticeAgency {
    /// `"LH"` or `"SH"`.
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeAgency::Lh => "LH",
            NoticeAgency::Sh => "SH",
        }
    }

    /// The agency's Korean name.
    pub fn korean_name(self) -> &'static str {
        match self {
            NoticeAgency::Lh => "한국토지주택공사",
            NoticeAgency::Sh => "서울주택도시공사",
        }
    }
}

impl fmt::Display for NoticeAgency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One housing-subscription (청약) notice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// The publisher's id of the notice (LH's `PAN_ID`).
    pub id: String,
    /// The title (공고명).
    pub title: String,
    /// What is offered: 행복주택, 국민임대, 매입임대, 공공분양, …
    pub kind: String,
    /// Where: a province or city (`서울특별시`), possibly with a district.
    pub region: String,
    /// Posting date, `YYYY-MM-DD`, when known.
    pub posted: Option<String>,
    /// Closing date, `YYYY-MM-DD`, when known.
    pub closes: Option<String>,
    /// State as the publisher words it: 공고중, 접수중, 마감, …
    pub status: String,
    /// The notice's page, when the source gives one.
    pub url: Option<String>,
    /// The publisher.
    pub source: NoticeAgency,
    /// The lowest deposit (보증금) in won, when the source states one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deposit: Option<u64>,
    /// The lowest monthly rent (월 임대료) in won, when stated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_rent: Option<u64>,
    /// The lowest sale price (분양가) in won, when stated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<u64>,
    /// Whether this is bundled sample data rather than a real notice.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sample: bool,
}

impl Notice {
    /// The key a watch remembers it by: `"<agency>:<id>"`.
    pub fn key(&self) -> String {
        format!("{}:{}", self.source, self.id)
    }
}

/// What to look for. Empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoticeQuery {
    /// A region: a province or city (`서울`, `경기도`, `부산광역시`) or any
    /// other place name (`강서구`). Several words must all match.
    pub region: Option<String>,
    /// A word the title must contain (spaces ignored, case-insensitive).
    pub keyword: Option<String>,
    /// How many notices at most; [`DEFAULT_NOTICE_LIMIT`] when absent,
    /// never more than [`MAX_NOTICE_LIMIT`].
    pub limit: Option<usize>,
}

impl NoticeQuery {
    /// A query for everything, newest first.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the region.
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Sets the title keyword.
    pub fn with_keyword(mut self, keyword: impl Into<String>) -> Self {
        self.keyword = Some(keyword.into());
        self
    }

    /// Sets the limit.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The limit in force: the given one within `1..=MAX_NOTICE_LIMIT`, or
    /// the default.
    pub fn effective_limit(&self) -> usize {
        self.limit
            .unwrap_or(DEFAULT_NOTICE_LIMIT)
            .clamp(1, MAX_NOTICE_LIMIT)
    }

    /// The region with blank values treated as absent.
    pub(crate) fn region(&self) -> Option<&str> {
        self.region.as_deref().map(str::trim).filter(|r| !r.is_empty())
    }

    /// The keyword with blank values treated as absent.
    pub(crate) fn keyword(&self) -> Option<&str> {
        self.keyword.as_deref().map(str::trim).filter(|k| !k.is_empty())
    }

    /// Whether `notice` matches the region and keyword (the limit aside).
    pub fn matches(&self, notice: &Notice) -> bool {
        let keyword_ok = self
            .keyword()
            .is_none_or(|keyword| squash(&notice.title).contains(&squash(keyword)));
        if !keyword_ok {
            return false;
        }
        match self.region() {
            Some(region) => region_matches(region, notice),
            None => true,
        }
    }

    /// Keeps the notices that match, newest first, at most the limit.
    pub fn apply(&self, notices: Vec<Notice>) -> Vec<Notice> {
        let mut kept: Vec<Notice> = notices.into_iter().filter(|n| self.matches(n)).collect();
        sort_newest_first(&mut kept);
        kept.truncate(self.effective_limit());
        kept
    }
}

/// Sorts by posting date, newest first; undated notices last, order kept
/// among equals.
pub fn sort_newest_first(notices: &mut [Notice]) {
    notices.sort_by(|a, b| match (&a.posted, &b.posted) {
        (Some(x), Some(y)) => y.cmp(x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
}

/// A place notices come from: LH's public API, an SH feed, bundled samples.
///
/// Implementations filter with [`NoticeQuery::apply`] (after any filtering
/// the service does itself), so every source answers a query the same way.
pub trait NoticeSource: Send + Sync + fmt::Debug {
    /// The publisher whose notices this source serves.
    fn agency(&self) -> NoticeAgency;

    /// Where the notices come from, in a few words, for tool results
    /// (`"LH 공공데이터포털 API"`, `"샘플 데이터"`).
    fn describe(&self) -> String;

    /// The notices matching `query`, newest first.
    fn fetch(&self, query: NoticeQuery) -> BoxFuture<'_, Result<Vec<Notice>, NoticeError>>;
}

/// A source that cannot serve anything, with the reason it gives on every
/// call (a look-up whose configuration is missing).
#[derive(Debug, Clone)]
pub struct UnconfiguredSource {
    agency: NoticeAgency,
    service: String,
    message: String,
}

impl UnconfiguredSource {
    /// A source for `agency` that always answers
    /// [`NoticeError::NotConfigured`] with `message`.
    pub fn new(agency: NoticeAgency, message: impl Into<String>) -> Self {
        Self {
            agency,
            service: agency.as_str().to_lowercase(),
            message: message.into(),
        }
    }
}

impl NoticeSource for UnconfiguredSource {
    fn agency(&self) -> NoticeAgency {
        self.agency
    }

    fn describe(&self) -> String {
        format!("{} (설정되지 않음)", self.agency)
    }

    fn fetch(&self, _query: NoticeQuery) -> BoxFuture<'_, Result<Vec<Notice>, NoticeError>> {
        let error = NoticeError::not_configured(self.service.clone(), self.message.clone());
        Box::pin(async move { Err(error) })
    }
}

/// A province or metropolitan city, the level LH's `CNP_CD` works at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Province {
    /// Every spelling that names it, the short one people use first.
    pub(crate) names: &'static [&'static str],
    /// LH's `CNP_CD` for it, where public code calling LH's notice API was
    /// seen to use it; `None` where no such use was found (filtered on our
    /// side only).
    pub(crate) lh_code: Option<&'static str>,
}

/// The provinces. The two-digit codes are the administrative (시도) code
/// prefixes; those marked were seen sent as `CNP_CD` to
/// `lhLeaseNoticeInfo1` by public client code. The others are filtered on
/// our side only, because their codes (세종 36 or 36110, 강원 42 or 51, 전북
/// 45 or 52 after the 2023–24 reorganisations) could not be confirmed.
pub(crate) const PROVINCES: &[Province] = &[
    Province {
        names: &["서울", "서울특별시", "서울시"],
        lh_code: Some("11"),
    },
    Province {
        names: &["부산", "부산광역시", "부산시"],
        lh_code: Some("26"),
    },
    Province {
        names: &["대구", "대구광역시", "대구시"],
        lh_code: Some("27"),
    },
    Province {
        names: &["인천", "인천광역시", "인천시"],
        lh_code: Some("28"),
    },
    Province {
        names: &["광주", "광주광역시"],
        lh_code: Some("29"),
    },
    Province {
        names: &["대전", "대전광역시", "대전시"],
        lh_code: Some("30"),
    },
    Province {
        names: &["울산", "울산광역시", "울산시"],
        lh_code: Some("31"),
    },
    Province {
        names: &["세종", "세종특별자치시", "세종시"],
        lh_code: None,
    },
    Province {
        names: &["경기", "경기도"],
        lh_code: Some("41"),
    },
    Province {
        names: &["강원", "강원도", "강원특별자치도"],
        lh_code: None,
    },
    Province {
        names: &["충북", "충청북도"],
        lh_code: None,
    },
    Province {
        names: &["충남", "충청남도"],
        lh_code: None,
    },
    Province {
        names: &["전북", "전라북도", "전북특별자치도"],
        lh_code: None,
    },
    Province {
        names: &["전남", "전라남도"],
        lh_code: None,
    },
    Province {
        names: &["경북", "경상북도"],
        lh_code: None,
    },
    Province {
        names: &["경남", "경상남도"],
        lh_code: None,
    },
    Province {
        names: &["제주", "제주도", "제주특별자치도"],
        lh_code: None,
    },
];

/// The province a word names, if any (`서울특별시` → 서울).
pub(crate) fn province(word: &str) -> Option<&'static Province> {
    let word = squash(word);
    PROVINCES.iter().find(|p| p.names.iter().any(|n| *n == word))
}

/// LH's `CNP_CD` for the province that the first word of `region` names,
/// where it is known.
pub(crate) fn lh_region_code(region: &str) -> Option<&'static str> {
    province(region.split_whitespace().next()?)?.lh_code
}

/// Every word of `region` must name the notice's province (in any
/// spelling) or appear in its region or title.
fn region_matches(region: &str, notice: &Notice) -> bool {
    let haystack = format!("{}{}", squash(&notice.region), squash(&notice.title));
    region.split_whitespace().all(|word| match province(word) {
        Some(p) => p.names.iter().any(|n| haystack.contains(n)),
        None => haystack.contains(&squash(word)),
    })
}

/// Lower case without whitespace, for lenient comparisons
/// (`"행복 주택"` matches `"행복주택"`).
pub(crate) fn squash(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect()
}

/// A date as `YYYY-MM-DD` from `2024.04.15`, `20240415` or `2024-04-15`;
/// other non-empty text is kept as written; blank is `None`.
pub(crate) fn normalize_date(raw: &str) -> Option<String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return None;
    }
    let digits: String = raw.chars().filter(char::is_ascii_digit).collect();
    let only_date_chars = raw
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '/'));
    if digits.len() == 8 && only_date_chars {
        return Some(format!("{}-{}-{}", &digits[..4], &digits[4..6], &digits[6..]));
    }
    Some(raw.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(title: &str, region: &str, posted: Option<&str>) -> Notice {
        Notice {
            id: title.into(),
            title: title.into(),
            kind: "행복주택".into(),
            region: region.into(),
            posted: posted.map(str::to_owned),
            closes: None,
            status: "공고중".into(),
            url: None,
            source: NoticeAgency::Lh,
            deposit: None,
            monthly_rent: None,
            price: None,
            sample: false,
        }
    }

    #[test]
    fn regions_match_any_spelling_of_a_province_and_other_words_literally() {
        let n = notice("서울 강서구 행복주택 입주자 모집 공고", "서울특별시", None);
        for region in ["서울", "서울특별시", "서울시", " 서울 ", "서울 강서구", "강서구"]
        {
            assert!(NoticeQuery::new().with_region(region).matches(&n), "{region}");
        }
        for region in ["부산", "경기", "서울 마포구", "마포구"] {
            assert!(!NoticeQuery::new().with_region(region).matches(&n), "{region}");
        }
        let jeonbuk = notice("전주평화 임대주택", "전북특별자치도", None);
        assert!(NoticeQuery::new().with_region("전라북도").matches(&jeonbuk));
        assert!(NoticeQuery::new().with_region("전북").matches(&jeonbuk));
    }

    #[test]
    fn keywords_ignore_spaces_and_case() {
        let n = notice("서울 강서구 행복주택 입주자 모집 공고", "서울특별시", None);
        assert!(NoticeQuery::new().with_keyword("행복 주택").matches(&n));
        assert!(NoticeQuery::new().with_keyword("입주자모집").matches(&n));
        assert!(!NoticeQuery::new().with_keyword("청약").matches(&n));
        assert!(
            NoticeQuery::new().with_keyword("  ").matches(&n),
            "blank matches all"
        );
        let latin = notice("SH Tower 공고", "서울특별시", None);
        assert!(NoticeQuery::new().with_keyword("sh tower").matches(&latin));
    }

    #[test]
    fn apply_sorts_newest_first_and_limits() {
        let notices = vec![
            notice("a", "서울특별시", Some("2025-01-02")),
            notice("b", "서울특별시", None),
            notice("c", "서울특별시", Some("2025-03-01")),
            notice("d", "부산광역시", Some("2025-04-01")),
        ];
        let got = NoticeQuery::new()
            .with_region("서울")
            .with_limit(2)
            .apply(notices.clone());
        let titles: Vec<_> = got.iter().map(|n| n.title.as_str()).collect();
        assert_eq!(titles, ["c", "a"]);
        let all = NoticeQuery::new().with_limit(100).apply(notices);
        assert_eq!(all.len(), 4);
        assert_eq!(all.last().unwrap().title, "b", "undated last");
    }

    #[test]
    fn limits_are_clamped() {
        assert_eq!(NoticeQuery::new().effective_limit(), DEFAULT_NOTICE_LIMIT);
        assert_eq!(NoticeQuery::new().with_limit(0).effective_limit(), 1);
        assert_eq!(
            NoticeQuery::new().with_limit(500).effective_limit(),
            MAX_NOTICE_LIMIT
        );
    }

    #[test]
    fn dates_normalise() {
        assert_eq!(normalize_date("2024.04.15").as_deref(), Some("2024-04-15"));
        assert_eq!(normalize_date("20240412").as_deref(), Some("2024-04-12"));
        assert_eq!(normalize_date("2024-04-12").as_deref(), Some("2024-04-12"));
        assert_eq!(normalize_date(" ").as_deref(), None);
        assert_eq!(normalize_date("상시").as_deref(), Some("상시"));
    }

    #[test]
    fn lh_codes_only_for_confirmed_provinces() {
        assert_eq!(lh_region_code("서울특별시"), Some("11"));
        assert_eq!(lh_region_code("경기 수원시"), Some("41"));
        assert_eq!(lh_region_code("강원"), None);
        assert_eq!(lh_region_code("강서구"), None);
        assert_eq!(lh_region_code(""), None);
    }

    #[test]
    fn agencies_serialise_as_their_abbreviations() {
        assert_eq!(serde_json::to_string(&NoticeAgency::Sh).unwrap(), "\"SH\"");
        let n = notice("t", "서울특별시", None);
        assert_eq!(n.key(), "LH:t");
        let json = serde_json::to_value(&n).unwrap();
        assert!(json.get("sample").is_none() && json.get("deposit").is_none());
    }
}
