//! [`ShNoticeSource`]: SH (서울주택도시공사, Seoul Housing & Communities)
//! notices from a configured feed.
//!
//! SH has no public notice API that could be verified: its notices are
//! published as pages of its website (i-sh.co.kr), which public scrapers
//! read as HTML. Rather than invent an endpoint or scrape pages whose
//! layout may change without notice, this source reads a JSON feed in the
//! simple format of the `feed` module (documented in docs/tools.md), from an
//! `http(s)://` URL or a local file named by `JARVIS_HOUSING__SH_URL`: a
//! feed someone maintains, or an export of their own. Unconfigured, every
//! look-up says so plainly ([`SH_NOT_CONFIGURED`]).

use futures::future::BoxFuture;
use std::path::PathBuf;

use super::error::NoticeError;
use super::feed::parse_feed;
use super::notice::{Notice, NoticeAgency, NoticeQuery, NoticeSource};
use jarvis_sdk::model::HttpClient;
use jarvis_sdk::model::HttpSettings;

/// The environment variable naming the SH feed (URL or file path).
pub const SH_URL_ENV: &str = "JARVIS_HOUSING__SH_URL";

/// What an unconfigured SH look-up answers.
pub const SH_NOT_CONFIGURED: &str = "SH has no public API that could be verified (서울주택도시공사 publishes its \
     notices as web pages); configure a notice feed with JARVIS_HOUSING__SH_URL (a JSON feed URL or file, format \
     in docs/tools.md) or use the fixture source (JARVIS_HOUSING__MODE=fixture, sample data only)";

const SERVICE: &str = "sh";
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Where the SH feed is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShFeed {
    /// An `http://` or `https://` URL, fetched on every look-up.
    Url(String),
    /// A local file, read on every look-up.
    File(PathBuf),
}

impl ShFeed {
    /// A URL for `http(s)://…`, a file for `file://…` or any other text.
    pub fn parse(location: &str) -> Self {
        let location = location.trim();
        if location.starts_with("http://") || location.starts_with("https://") {
            ShFeed::Url(location.to_owned())
        } else {
            ShFeed::File(PathBuf::from(
                location.strip_prefix("file://").unwrap_or(location),
            ))
        }
    }
}

/// SH notices from a configured feed.
#[derive(Debug)]
pub struct ShNoticeSource {
    feed: Option<ShFeed>,
    client: Option<HttpClient>,
}

impl ShNoticeSource {
    /// A source without a feed: every look-up answers [`SH_NOT_CONFIGURED`].
    pub fn unconfigured() -> Self {
        Self {
            feed: None,
            client: None,
        }
    }

    /// A source reading `feed`, with default timeouts and retries for a URL.
    pub fn new(feed: ShFeed) -> Result<Self, NoticeError> {
        Self::with_http(feed, HttpSettings::default())
    }

    /// A source reading `feed`; a URL is fetched with `http`.
    pub fn with_http(feed: ShFeed, http: HttpSettings) -> Result<Self, NoticeError> {
        let client = match feed {
            ShFeed::Url(_) => Some(
                HttpClient::new(SERVICE, http)
                    .map_err(|e| NoticeError::not_configured(SERVICE, e.to_string()))?,
            ),
            ShFeed::File(_) => None,
        };
        Ok(Self {
            feed: Some(feed),
            client,
        })
    }

    /// The configured feed, if any.
    pub fn feed(&self) -> Option<&ShFeed> {
        self.feed.as_ref()
    }

    async fn read(&self) -> Result<Vec<u8>, NoticeError> {
        match &self.feed {
            None => Err(NoticeError::not_configured(SERVICE, SH_NOT_CONFIGURED)),
            Some(ShFeed::File(path)) => std::fs::read(path).map_err(|e| NoticeError::Unreachable {
                service: SERVICE.to_owned(),
                message: format!("cannot read the feed file {}: {e}", path.display()),
                cause: Some(Box::new(e)),
            }),
            Some(ShFeed::Url(url)) => self.get(url).await,
        }
    }

    async fn get(&self, url: &str) -> Result<Vec<u8>, NoticeError> {
        let Some(client) = &self.client else {
            return Err(NoticeError::not_configured(
                SERVICE,
                "no HTTP client for the feed URL",
            ));
        };
        let from_http = |e| super::lh::from_http_error(SERVICE, e);
        let response = client.get(url, &[]).await.map_err(from_http)?;
        client.read_body(response, MAX_BODY).await.map_err(from_http)
    }
}

impl NoticeSource for ShNoticeSource {
    fn agency(&self) -> NoticeAgency {
        NoticeAgency::Sh
    }

    fn describe(&self) -> String {
        match &self.feed {
            None => "SH (설정되지 않음)".to_owned(),
            Some(_) => "SH 공고 피드 (설정된 피드, 공식 API 아님)".to_owned(),
        }
    }

    fn fetch(&self, query: NoticeQuery) -> BoxFuture<'_, Result<Vec<Notice>, NoticeError>> {
        Box::pin(async move {
            let body = self.read().await?;
            let notices = parse_feed(&body, NoticeAgency::Sh, SERVICE)?;
            Ok(query.apply(notices))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_urls_or_files() {
        assert_eq!(
            ShFeed::parse("https://x/feed.json"),
            ShFeed::Url("https://x/feed.json".into())
        );
        assert_eq!(ShFeed::parse(" http://x "), ShFeed::Url("http://x".into()));
        assert_eq!(
            ShFeed::parse("file:///tmp/sh.json"),
            ShFeed::File("/tmp/sh.json".into())
        );
        assert_eq!(
            ShFeed::parse("feeds/sh.json"),
            ShFeed::File("feeds/sh.json".into())
        );
    }
}
