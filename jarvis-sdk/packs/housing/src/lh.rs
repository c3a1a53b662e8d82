//! [`LhNoticeSource`]: LH's sale and lease notices from the public-data
//! portal (data.go.kr), service 한국토지주택공사_분양임대공고문 조회 서비스
//! (<https://www.data.go.kr/data/15058530/openapi.do>).
//!
//! One `GET {base}/lhLeaseNoticeInfo1/lhLeaseNoticeInfo1` with `serviceKey`,
//! `PG_SZ` (page size), `PAGE` and, for provinces whose code is known,
//! `CNP_CD`. The JSON answer is a list whose elements hold `dsSch` (the
//! query echoed), `resHeader` (`SS_CODE` is `Y` on success) and `dsList`
//! (the notices: `PAN_ID`, `PAN_NM`, `AIS_TP_CD_NM` / `UPP_AIS_TP_NM`,
//! `CNP_CD_NM`, `PAN_NT_ST_DT` / `PAN_DT`, `CLSG_DT`, `PAN_SS`, `DTL_URL`).
//! The portal's gateway answers key problems with a small XML document
//! (`returnAuthMsg`, e.g. `SERVICE_KEY_IS_NOT_REGISTERED_ERROR`).
//!
//! Region and keyword are also filtered on our side (region against
//! `CNP_CD_NM` and the title, keyword against the title), so a province
//! without a known code, a district name or a keyword still narrows the
//! page the service returned.

use futures::future::BoxFuture;
use serde_json::Value;
use std::time::Duration;

use super::error::NoticeError;
use super::feed::excerpt;
use super::notice::{Notice, NoticeAgency, NoticeQuery, NoticeSource, lh_region_code, normalize_date};
use jarvis_sdk::model::{ApiKey, HttpClient, HttpSettings, ProviderError, join_url};

/// The portal's base URL for LH's services.
pub const LH_BASE_URL: &str = "https://apis.data.go.kr/B552555";
/// The notice list operation, relative to the base URL.
pub const LH_NOTICE_PATH: &str = "lhLeaseNoticeInfo1/lhLeaseNoticeInfo1";
/// The environment variable holding the data.go.kr service key.
pub const LH_SERVICE_KEY_ENV: &str = "JARVIS_HOUSING__LH_SERVICE_KEY";
/// The environment variable overriding [`LH_BASE_URL`].
pub const LH_BASE_URL_ENV: &str = "JARVIS_HOUSING__LH_BASE_URL";

const SERVICE: &str = "lh";
const MAX_BODY: usize = 4 * 1024 * 1024;

/// How to reach LH's notice service.
#[derive(Debug, Clone)]
pub struct LhConfig {
    /// The service key data.go.kr issued (either its encoded or decoded
    /// form). Without one, every look-up fails with a clear message and no
    /// request is sent.
    pub service_key: Option<ApiKey>,
    /// The base URL; [`LH_BASE_URL`] by default.
    pub base_url: String,
    /// Notices requested per look-up (`PG_SZ`), 1 to 100; default 50.
    /// Filtering on our side picks from this page.
    pub page_size: usize,
    /// Timeouts and retries; by default 10 s to connect, 20 s of silence at
    /// most, 3 retries before the first byte.
    pub http: HttpSettings,
}

impl LhConfig {
    /// The default configuration with `service_key`.
    pub fn new(service_key: Option<ApiKey>) -> Self {
        Self {
            service_key,
            base_url: LH_BASE_URL.to_owned(),
            page_size: 50,
            http: HttpSettings {
                read_timeout: Duration::from_secs(20),
                ..HttpSettings::default()
            },
        }
    }

    /// Sets the base URL.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Sets the timeouts and retries.
    pub fn with_http(mut self, http: HttpSettings) -> Self {
        self.http = http;
        self
    }
}

/// LH notices from data.go.kr.
#[derive(Debug)]
pub struct LhNoticeSource {
    client: HttpClient,
    url: String,
    service_key: Option<String>,
    page_size: usize,
}

impl LhNoticeSource {
    /// A source using `config`.
    pub fn new(config: LhConfig) -> Result<Self, NoticeError> {
        let client = HttpClient::new(SERVICE, config.http)
            .map_err(|e| NoticeError::not_configured(SERVICE, e.to_string()))?;
        let service_key = config
            .service_key
            .map(|k| percent_decode(k.expose().trim()))
            .filter(|k| !k.is_empty());
        Ok(Self {
            client,
            url: join_url(&config.base_url, LH_NOTICE_PATH),
            service_key,
            page_size: config.page_size.clamp(1, 100),
        })
    }

    async fn fetch_page(&self, query: &NoticeQuery) -> Result<Vec<Notice>, NoticeError> {
        let Some(key) = &self.service_key else {
            return Err(NoticeError::not_configured(
                SERVICE,
                format!(
                    "no service key: set {LH_SERVICE_KEY_ENV} to the key data.go.kr issues for \
                     한국토지주택공사_분양임대공고문 조회 서비스 (https://www.data.go.kr/data/15058530/openapi.do)"
                ),
            ));
        };
        let mut params = vec![
            ("serviceKey", key.clone()),
            ("PG_SZ", self.page_size.to_string()),
            ("PAGE", "1".to_owned()),
        ];
        if let Some(code) = query.region().and_then(lh_region_code) {
            params.push(("CNP_CD", code.to_owned()));
        }
        let response = self.client.get(&self.url, &params).await.map_err(from_http)?;
        let body = self
            .client
            .read_body(response, MAX_BODY)
            .await
            .map_err(from_http)?;
        parse_notice_list(&body)
    }
}

impl NoticeSource for LhNoticeSource {
    fn agency(&self) -> NoticeAgency {
        NoticeAgency::Lh
    }

    fn describe(&self) -> String {
        "LH 공공데이터포털 API (한국토지주택공사_분양임대공고문 조회 서비스)".to_owned()
    }

    fn fetch(&self, query: NoticeQuery) -> BoxFuture<'_, Result<Vec<Notice>, NoticeError>> {
        Box::pin(async move {
            let page = self.fetch_page(&query).await?;
            Ok(query.apply(page))
        })
    }
}

/// The HTTP client's error in this source's words.
pub(crate) fn from_http_error(service: &str, error: ProviderError) -> NoticeError {
    match error {
        ProviderError::Transport { message, source, .. } => NoticeError::Unreachable {
            service: service.to_owned(),
            message,
            cause: source,
        },
        ProviderError::Api { status, message, .. } => NoticeError::api(service, status, message),
        ProviderError::Stream { message, .. } => NoticeError::malformed(service, message),
        other => NoticeError::api(service, None, other.to_string()),
    }
}

fn from_http(error: ProviderError) -> NoticeError {
    from_http_error(SERVICE, error)
}

/// The notices of one answer of `lhLeaseNoticeInfo1`.
pub(crate) fn parse_notice_list(body: &[u8]) -> Result<Vec<Notice>, NoticeError> {
    let text = String::from_utf8_lossy(body);
    let trimmed = text.trim_start();
    if trimmed.starts_with('<') {
        return Err(gateway_error(trimmed));
    }
    let json: Value = serde_json::from_str(trimmed)
        .map_err(|e| NoticeError::malformed(SERVICE, format!("not JSON ({e}): {}", excerpt(body))))?;
    let Some(blocks) = json.as_array() else {
        return Err(NoticeError::malformed(
            SERVICE,
            format!(
                "expected a list of dsSch/resHeader/dsList blocks: {}",
                excerpt(body)
            ),
        ));
    };
    let header = blocks.iter().find_map(|b| b.get("resHeader")).ok_or_else(|| {
        NoticeError::malformed(SERVICE, format!("no resHeader in the answer: {}", excerpt(body)))
    })?;
    let header = header.as_array().and_then(|h| h.first()).unwrap_or(header);
    let code = text_field(header, "SS_CODE");
    if code != "Y" {
        let detail = header
            .as_object()
            .map(|h| {
                h.iter()
                    .filter(|(k, _)| k.as_str() != "SS_CODE")
                    .map(|(k, v)| format!("{k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let code = if code.is_empty() {
            "(missing)".to_owned()
        } else {
            code
        };
        return Err(NoticeError::api(
            SERVICE,
            None,
            format!(
                "SS_CODE {code} instead of Y{}",
                if detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({detail})")
                }
            ),
        ));
    }
    let rows = match blocks.iter().find_map(|b| b.get("dsList")) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(rows)) => rows,
        Some(other) => {
            return Err(NoticeError::malformed(
                SERVICE,
                format!("dsList is not a list: {}", excerpt(other.to_string().as_bytes())),
            ));
        }
    };
    let notices: Vec<Notice> = rows.iter().filter_map(notice_from_row).collect();
    if notices.len() < rows.len() {
        tracing::warn!(
            skipped = rows.len() - notices.len(),
            "lh notice rows without PAN_ID or PAN_NM were skipped"
        );
    }
    if notices.is_empty() && !rows.is_empty() {
        return Err(NoticeError::malformed(
            SERVICE,
            "no dsList row has both PAN_ID and PAN_NM",
        ));
    }
    Ok(notices)
}

fn notice_from_row(row: &Value) -> Option<Notice> {
    let id = text_field(row, "PAN_ID");
    let title = text_field(row, "PAN_NM");
    if id.is_empty() || title.is_empty() {
        return None;
    }
    let kind = Some(text_field(row, "AIS_TP_CD_NM"))
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| text_field(row, "UPP_AIS_TP_NM"));
    let posted = normalize_date(&text_field(row, "PAN_NT_ST_DT"))
        .or_else(|| normalize_date(&text_field(row, "PAN_DT")));
    let url = Some(text_field(row, "DTL_URL")).filter(|u| !u.is_empty());
    Some(Notice {
        id,
        title,
        kind,
        region: text_field(row, "CNP_CD_NM"),
        posted,
        closes: normalize_date(&text_field(row, "CLSG_DT")),
        status: text_field(row, "PAN_SS"),
        url,
        source: NoticeAgency::Lh,
        deposit: None,
        monthly_rent: None,
        price: None,
        sample: false,
    })
}

/// A member as trimmed text; numbers are written out, anything else is
/// empty.
fn text_field(value: &Value, key: &str) -> String {
    match value.get(key) {
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// The portal gateway's XML error (`returnAuthMsg`, `errMsg`,
/// `returnReasonCode`) as an API error.
fn gateway_error(xml: &str) -> NoticeError {
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let close = format!("</{name}>");
        let start = xml.find(&open)? + open.len();
        let end = start + xml[start..].find(&close)?;
        Some(xml[start..end].trim().to_owned())
    };
    let message = match (tag("returnAuthMsg"), tag("errMsg"), tag("returnReasonCode")) {
        (Some(auth), _, Some(code)) => format!("{auth} (reason code {code})"),
        (Some(auth), _, None) => auth,
        (None, Some(err), _) => err,
        (None, None, _) => {
            return NoticeError::malformed(
                SERVICE,
                format!("an XML answer instead of JSON: {}", excerpt(xml.as_bytes())),
            );
        }
    };
    let hint = if message.contains("SERVICE_KEY") {
        format!(" — check {LH_SERVICE_KEY_ENV}")
    } else {
        String::new()
    };
    NoticeError::api(
        SERVICE,
        None,
        format!("the data.go.kr gateway refused the call: {message}{hint}"),
    )
}

/// Decodes `%XX` sequences, so the "encoding" key data.go.kr shows can be
/// used as it is (the query is encoded again when sent).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_keys_are_decoded_once() {
        assert_eq!(percent_decode("abc%2Bdef%2F%3D%3D"), "abc+def/==");
        assert_eq!(percent_decode("plain+key/=="), "plain+key/==");
        assert_eq!(percent_decode("bad%zzend%"), "bad%zzend%");
        assert_eq!(percent_decode("%4"), "%4");
    }

    #[test]
    fn gateway_xml_names_the_key_problem() {
        let xml = "<OpenAPI_ServiceResponse><cmmMsgHeader><errMsg>SERVICE ERROR</errMsg>\
                   <returnAuthMsg>SERVICE_KEY_IS_NOT_REGISTERED_ERROR</returnAuthMsg>\
                   <returnReasonCode>30</returnReasonCode></cmmMsgHeader></OpenAPI_ServiceResponse>";
        let err = parse_notice_list(xml.as_bytes()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("SERVICE_KEY_IS_NOT_REGISTERED_ERROR (reason code 30)"),
            "{text}"
        );
        assert!(text.contains(LH_SERVICE_KEY_ENV), "{text}");
        let other = parse_notice_list(b"<html>maintenance</html>").unwrap_err();
        assert!(matches!(other, NoticeError::Malformed { .. }), "{other}");
    }

    #[test]
    fn rows_without_id_or_title_are_skipped() {
        let body = br#"[{"dsSch":[{"PAGE":"1"}]},{"resHeader":[{"SS_CODE":"Y"}],"dsList":[
            {"PAN_ID":"1","PAN_NM":"a","PAN_DT":"20250101","ALL_CNT":2},
            {"PAN_ID":"","PAN_NM":"b"}, 7]}]"#;
        let got = parse_notice_list(body).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].posted.as_deref(), Some("2025-01-01"));
        let none = br#"[{"resHeader":[{"SS_CODE":"Y"}],"dsList":[{"PAN_NM":"b"}]}]"#;
        assert!(matches!(
            parse_notice_list(none),
            Err(NoticeError::Malformed { .. })
        ));
        let empty = br#"[{"resHeader":[{"SS_CODE":"Y"}]}]"#;
        assert!(parse_notice_list(empty).unwrap().is_empty());
    }
}
