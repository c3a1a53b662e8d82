//! `lh_notice` and `sh_notice`: notice look-ups over a [`NoticeSource`],
//! answered as a list a model can quote (title, kind, region, dates,
//! status, link, publisher) or a plain "no notice matched".

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

use super::format::notice_list;
use super::notice::{MAX_NOTICE_LIMIT, NoticeAgency, NoticeQuery, NoticeSource};
use jarvis_sdk::agent::{ToolContext, ToolError, ToolResult, TypedTool};

const MAX_TEXT: usize = 50;

/// Arguments of `lh_notice` and `sh_notice`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct NoticeArgs {
    /// A region: a province or city (`서울`, `경기`, `부산광역시`) or a district
    /// (`강서구`); several words must all match. All regions when absent.
    #[serde(default)]
    pub region: Option<String>,
    /// A word the notice title must contain (`행복주택`, `국민임대`). Any title
    /// when absent; prefer leaving it out to filtering on generic words.
    #[serde(default)]
    pub keyword: Option<String>,
    /// How many notices, newest first: 1 to 20, default 5.
    #[serde(default)]
    pub limit: Option<u32>,
}

impl NoticeArgs {
    /// The query, or why the arguments are out of range.
    pub fn to_query(&self) -> Result<NoticeQuery, String> {
        if let Some(limit) = self.limit
            && (limit == 0 || limit as usize > MAX_NOTICE_LIMIT)
        {
            return Err(format!(
                "limit must be 1 to {MAX_NOTICE_LIMIT} (limit은 1~{MAX_NOTICE_LIMIT}), got {limit}"
            ));
        }
        for (name, value) in [("region", &self.region), ("keyword", &self.keyword)] {
            if value.as_deref().is_some_and(|v| v.chars().count() > MAX_TEXT) {
                return Err(format!("{name} must be at most {MAX_TEXT} characters"));
            }
        }
        Ok(NoticeQuery {
            region: self.region.clone(),
            keyword: self.keyword.clone(),
            limit: self.limit.map(|l| l as usize),
        })
    }
}

/// A notice look-up tool: `lh_notice` or `sh_notice`.
#[derive(Debug, Clone)]
pub struct NoticeTool {
    name: &'static str,
    description: &'static str,
    source: Arc<dyn NoticeSource>,
}

impl NoticeTool {
    /// `lh_notice` over `source`.
    pub fn lh(source: Arc<dyn NoticeSource>) -> Self {
        Self {
            name: "lh_notice",
            description: "Looks up LH (한국토지주택공사) housing subscription notices (분양·임대 청약 공고), \
                newest first, optionally by region, title keyword and limit. Returns each notice's title, \
                kind, region, posting and closing dates, status, link and source, or says plainly that \
                nothing matched. Answer only from what it returns.",
            source,
        }
    }

    /// `sh_notice` over `source`.
    pub fn sh(source: Arc<dyn NoticeSource>) -> Self {
        Self {
            name: "sh_notice",
            description: "Looks up SH (서울주택도시공사, Seoul) housing subscription notices (청약 공고), \
                newest first, optionally by region, title keyword and limit. Returns each notice's title, \
                kind, region, posting and closing dates, status, link and source, or says plainly that \
                nothing matched. Answer only from what it returns.",
            source,
        }
    }

    /// The tool for `agency` over `source`.
    pub fn for_agency(agency: NoticeAgency, source: Arc<dyn NoticeSource>) -> Self {
        match agency {
            NoticeAgency::Lh => Self::lh(source),
            NoticeAgency::Sh => Self::sh(source),
        }
    }
}

#[async_trait]
impl TypedTool for NoticeTool {
    type Args = NoticeArgs;

    fn name(&self) -> &str {
        self.name
    }

    /// One agent's domain: only agents that list it have it.
    fn agent_only(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        self.description
    }

    async fn run(&self, args: NoticeArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let query = match args.to_query() {
            Ok(query) => query,
            Err(message) => return Ok(ToolResult::error(message)),
        };
        let agency = self.source.agency();
        let fetched = tokio::select! {
            fetched = self.source.fetch(query.clone()) => fetched,
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        match fetched {
            Ok(notices) => Ok(ToolResult::ok(notice_list(
                &self.source.describe(),
                &query,
                &notices,
            ))),
            Err(e) => Ok(ToolResult::error(format!(
                "{agency} 공고를 조회하지 못했습니다 (lookup failed): {e}"
            ))),
        }
    }
}
