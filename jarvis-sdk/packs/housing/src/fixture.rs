//! [`FixtureNoticeSource`]: bundled sample notices for the offline demo and
//! tests. Every notice it serves is marked as sample data.

use futures::future::BoxFuture;

use super::error::NoticeError;
use super::feed::parse_feed;
use super::notice::{Notice, NoticeAgency, NoticeQuery, NoticeSource};

const SAMPLE_LH: &str = include_str!("sample_lh.json");
const SAMPLE_SH: &str = include_str!("sample_sh.json");

/// Serves a fixed list of sample notices, filtered like every source.
#[derive(Debug, Clone)]
pub struct FixtureNoticeSource {
    agency: NoticeAgency,
    notices: Vec<Notice>,
}

impl FixtureNoticeSource {
    /// The bundled LH samples (several regions, kinds and states).
    pub fn lh() -> Self {
        Self::bundled(NoticeAgency::Lh, SAMPLE_LH)
    }

    /// The bundled SH samples (Seoul).
    pub fn sh() -> Self {
        Self::bundled(NoticeAgency::Sh, SAMPLE_SH)
    }

    /// The bundled samples of `agency`.
    pub fn for_agency(agency: NoticeAgency) -> Self {
        match agency {
            NoticeAgency::Lh => Self::lh(),
            NoticeAgency::Sh => Self::sh(),
        }
    }

    fn bundled(agency: NoticeAgency, json: &str) -> Self {
        // The bundled files are checked by the tests below; an error here
        // would be a build defect, and an empty source is the safe fallback.
        let notices = parse_feed(json.as_bytes(), agency, "fixture").unwrap_or_default();
        Self::new(agency, notices)
    }

    /// Samples from `notices`; each is marked as sample data.
    pub fn new(agency: NoticeAgency, notices: Vec<Notice>) -> Self {
        let notices = notices
            .into_iter()
            .map(|mut n| {
                n.sample = true;
                n.source = agency;
                n
            })
            .collect();
        Self { agency, notices }
    }

    /// Samples from a feed (the format of [`ShNoticeSource`](super::ShNoticeSource)).
    pub fn from_feed_json(agency: NoticeAgency, json: &str) -> Result<Self, NoticeError> {
        Ok(Self::new(agency, parse_feed(json.as_bytes(), agency, "fixture")?))
    }

    /// Every sample, in file order.
    pub fn notices(&self) -> &[Notice] {
        &self.notices
    }
}

impl NoticeSource for FixtureNoticeSource {
    fn agency(&self) -> NoticeAgency {
        self.agency
    }

    fn describe(&self) -> String {
        format!("{} 샘플 데이터 (실제 공고 아님)", self.agency)
    }

    fn fetch(&self, query: NoticeQuery) -> BoxFuture<'_, Result<Vec<Notice>, NoticeError>> {
        let found = query.apply(self.notices.clone());
        Box::pin(async move { Ok(found) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_samples_parse_and_are_marked() {
        for (agency, json) in [(NoticeAgency::Lh, SAMPLE_LH), (NoticeAgency::Sh, SAMPLE_SH)] {
            let parsed = parse_feed(json.as_bytes(), agency, "fixture").unwrap();
            assert!(parsed.len() >= 6, "{agency}");
            let source = FixtureNoticeSource::for_agency(agency);
            assert_eq!(source.notices().len(), parsed.len());
            assert!(source.notices().iter().all(|n| n.sample && n.source == agency));
            let mut ids: Vec<_> = parsed.iter().map(|n| &n.id).collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), parsed.len(), "{agency}: ids are unique");
        }
        assert!(
            FixtureNoticeSource::sh()
                .notices()
                .iter()
                .all(|n| n.region.starts_with("서울")),
            "SH samples are in Seoul"
        );
    }
}
