//! `housing_budget`: open notices that fit a budget and the stored profile.
//!
//! The rule is deliberately simple and stated in every answer:
//!
//! - notices whose status says 마감 (closed) are left out;
//! - a **rental** (a deposit is stated) fits when the deposit is at most
//!   the budget and, if the profile has a monthly budget, the monthly rent
//!   is at most that;
//! - a **sale** (a price is stated) fits when the price is at most the
//!   budget; otherwise the gap is priced as a reference loan (equal payment
//!   over 30 years at [`DEFAULT_REFERENCE_RATE`] % unless configured), and
//!   the notice "fits with a loan" when that payment is at most the
//!   profile's monthly budget (or, without one, is shown with its payment
//!   for the person to judge);
//! - notices that state no amount (LH's list API gives none) are listed
//!   apart, to be checked on their page.
//!
//! Eligibility (income, assets, homelessness, subscription account) is not
//! judged; the answer points to the notice for it.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::sync::Arc;

use super::format::{notice_block, won};
use super::loan::{LoanTerms, RepaymentMethod, amortize};
use super::notice::{MAX_NOTICE_LIMIT, Notice, NoticeQuery, NoticeSource, sort_newest_first};
use super::profile::{HousingProfile, ProfileStore};
use jarvis_sdk::agent::{ToolContext, ToolError, ToolResult, TypedTool};

/// The yearly rate (%) of the reference loan that prices a sale's gap.
pub const DEFAULT_REFERENCE_RATE: f64 = 4.0;
/// The term of the reference loan, in years.
pub const REFERENCE_LOAN_YEARS: u32 = 30;
const MAX_BUDGET: f64 = 1_000_000_000_000.0;
const PER_SECTION: usize = 5;

/// Arguments of `housing_budget`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct HousingBudgetArgs {
    /// Money available for a deposit or down payment, in won (e.g. 30000000 for 3천만 원).
    pub budget: f64,
    /// A region to search (`서울`, `경기`); the profile's preferred regions, or
    /// everywhere, when absent.
    #[serde(default)]
    pub region: Option<String>,
}

/// Where one notice stands against the budget.
#[derive(Debug, Clone, PartialEq)]
enum Fit {
    /// Within the budget.
    Fits(String),
    /// Within the budget with the reference loan.
    WithLoan(String),
    /// Beyond it.
    Over(String),
    /// No amount stated.
    Unknown,
}

/// `housing_budget {budget, region?}`.
#[derive(Debug, Clone)]
pub struct HousingBudgetTool {
    sources: Vec<Arc<dyn NoticeSource>>,
    profiles: Arc<dyn ProfileStore>,
    reference_rate: f64,
}

impl HousingBudgetTool {
    /// The tool over `sources` (searched in order) and the profile in
    /// `profiles`, pricing loans at [`DEFAULT_REFERENCE_RATE`].
    pub fn new(sources: Vec<Arc<dyn NoticeSource>>, profiles: Arc<dyn ProfileStore>) -> Self {
        Self {
            sources,
            profiles,
            reference_rate: DEFAULT_REFERENCE_RATE,
        }
    }

    /// Prices the reference loan at `percent` a year (0 to 100; other values
    /// keep the default).
    pub fn with_reference_rate(mut self, percent: f64) -> Self {
        if percent.is_finite() && (0.0..=100.0).contains(&percent) {
            self.reference_rate = percent;
        }
        self
    }

    fn judge(&self, notice: &Notice, budget: f64, profile: &HousingProfile) -> Fit {
        // ponytail: the lowest amount a notice states stands for the whole
        // notice, and a sale's gap is priced as one fixed-rate loan; real
        // costs depend on the unit, the contract schedule and the lender.
        let monthly_cap = profile.monthly_budget.map(|m| m as f64);
        if let Some(price) = notice.price.map(|p| p as f64) {
            if price <= budget {
                return Fit::Fits(format!("분양가 {} ≤ 예산", won(price)));
            }
            let gap = price - budget;
            let Ok(terms) = LoanTerms::new(
                gap,
                self.reference_rate,
                f64::from(REFERENCE_LOAN_YEARS),
                RepaymentMethod::EqualPayment,
            ) else {
                return Fit::Over(format!("분양가 {}가 예산을 크게 넘음", won(price)));
            };
            let payment = amortize(&terms).first_payment();
            let loan = format!(
                "분양가 {} − 예산 = 부족액 {} → 연 {}%·{}년 원리금균등 대출이면 월 {}",
                won(price),
                won(gap),
                self.reference_rate,
                REFERENCE_LOAN_YEARS,
                won(payment)
            );
            return match monthly_cap {
                Some(cap) if payment > cap => Fit::Over(format!("{loan} > 월 부담 한도 {}", won(cap))),
                Some(cap) => Fit::WithLoan(format!("{loan} ≤ 월 부담 한도 {}", won(cap))),
                None => Fit::WithLoan(format!("{loan} (월 부담 한도가 프로필에 없어 직접 판단 필요)")),
            };
        }
        if let Some(deposit) = notice.deposit.map(|d| d as f64) {
            if deposit > budget {
                return Fit::Over(format!(
                    "보증금 {}가 예산보다 {} 많음",
                    won(deposit),
                    won(deposit - budget)
                ));
            }
            let rent = notice.monthly_rent.map(|r| r as f64);
            return match (rent, monthly_cap) {
                (Some(rent), Some(cap)) if rent > cap => Fit::Over(format!(
                    "보증금 {}는 예산 안이지만 월 임대료 {}가 월 부담 한도 {}를 넘음",
                    won(deposit),
                    won(rent),
                    won(cap)
                )),
                (Some(rent), _) => {
                    Fit::Fits(format!("보증금 {} ≤ 예산, 월 임대료 {}", won(deposit), won(rent)))
                }
                (None, _) => Fit::Fits(format!("보증금 {} ≤ 예산", won(deposit))),
            };
        }
        Fit::Unknown
    }
}

#[async_trait]
impl TypedTool for HousingBudgetTool {
    type Args = HousingBudgetArgs;

    fn name(&self) -> &str {
        "housing_budget"
    }

    /// One agent's domain: only agents that list it have it.
    fn agent_only(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "Recommends open LH and SH notices that fit a budget (예산에 맞는 공고): `budget` is the money \
         available for a deposit or down payment, in won; `region` narrows the search (else the \
         profile's preferred regions). Uses the stored housing profile's monthly budget; states its \
         rule, and lists notices without amounts separately."
    }

    async fn run(&self, args: HousingBudgetArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let budget = args.budget;
        if !budget.is_finite() || budget <= 0.0 || budget > MAX_BUDGET {
            return Ok(ToolResult::error(format!(
                "budget must be a positive amount in won up to {} (예산은 0보다 큰 원 단위 금액), got {budget}",
                won(MAX_BUDGET)
            )));
        }
        let region = args.region.as_deref().map(str::trim).filter(|r| !r.is_empty());
        if region.is_some_and(|r| r.chars().count() > 50) {
            return Ok(ToolResult::error("region must be at most 50 characters"));
        }
        let mut notes = Vec::new();
        let profile = match self.profiles.load().await {
            Ok(Some(profile)) => profile,
            Ok(None) => {
                notes.push(
                    "주거 프로필이 없어 예산만으로 판단했습니다 (housing_profile로 월 부담 한도 등을 저장하면 더 정확해집니다)."
                        .to_owned(),
                );
                HousingProfile::default()
            }
            Err(e) => {
                notes.push(format!("주거 프로필을 읽지 못해 예산만으로 판단했습니다: {e}"));
                HousingProfile::default()
            }
        };
        let regions: Vec<Option<String>> = match region {
            Some(r) => vec![Some(r.to_owned())],
            None => match profile.preferred_regions.as_deref() {
                Some(list) if !list.is_empty() => list.iter().take(3).map(|r| Some(r.clone())).collect(),
                _ => vec![None],
            },
        };
        let mut notices = Vec::new();
        let mut seen = BTreeSet::new();
        let mut failures: Vec<String> = Vec::new();
        let mut answered = 0;
        for source in &self.sources {
            for region in &regions {
                let query = NoticeQuery {
                    region: region.clone(),
                    keyword: None,
                    limit: Some(MAX_NOTICE_LIMIT),
                };
                let fetched = tokio::select! {
                    fetched = source.fetch(query) => fetched,
                    () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
                };
                match fetched {
                    Ok(found) => {
                        answered += 1;
                        for n in found {
                            if seen.insert(n.key()) {
                                notices.push(n);
                            }
                        }
                    }
                    Err(e) => {
                        let failure = format!("{}: {e}", source.agency());
                        if !failures.contains(&failure) {
                            failures.push(failure);
                        }
                    }
                }
            }
        }
        if answered == 0 {
            return Ok(ToolResult::error(format!(
                "공고를 조회하지 못했습니다 (no source answered): {}",
                failures.join(" / ")
            )));
        }
        sort_newest_first(&mut notices);
        let closed = notices.iter().filter(|n| n.status.contains("마감")).count();
        notices.retain(|n| !n.status.contains("마감"));

        let mut fits = Vec::new();
        let mut with_loan = Vec::new();
        let mut over = Vec::new();
        let mut unknown = Vec::new();
        for n in &notices {
            match self.judge(n, budget, &profile) {
                Fit::Fits(why) => fits.push((n, why)),
                Fit::WithLoan(why) => with_loan.push((n, why)),
                Fit::Over(why) => over.push((n, why)),
                Fit::Unknown => unknown.push((
                    n,
                    "공고에 금액 정보가 없어 판단하지 못함: 링크에서 확인 필요".to_owned(),
                )),
            }
        }

        let scope = match (region, &regions[..]) {
            (Some(r), _) => format!("지역: {r}"),
            (None, [None]) => "지역: 전체".to_owned(),
            (None, list) => format!(
                "지역: 프로필의 선호 지역 ({})",
                list.iter().flatten().cloned().collect::<Vec<_>>().join(", ")
            ),
        };
        let mut out = format!("예산 {} 기준 공고 추천 ({scope})\n", won(budget));
        out.push_str(&format!(
            "판단 기준: 임대는 보증금 ≤ 예산 (프로필에 월 부담 한도가 있으면 월 임대료도 그 이하), 분양은 분양가 ≤ 예산이면 가능, \
             모자라면 부족액을 연 {}%·{}년 원리금균등 대출로 본 월 상환액으로 판단합니다. 공고에 적힌 최저 금액 기준이며, \
             자격(소득·자산·무주택 등)과 실제 금액은 공고문에서 확인해야 합니다. 마감된 공고 {closed}건은 뺐습니다.",
            self.reference_rate, REFERENCE_LOAN_YEARS
        ));
        if profile.homeless == Some(false) {
            notes.push("프로필상 무주택 세대가 아닙니다: 공공임대·공공분양은 대개 무주택 세대를 대상으로 하니 자격을 공고문에서 꼭 확인하세요.".to_owned());
        }
        for (title, list) in [
            ("예산 안에 드는 공고", &fits),
            ("대출을 더하면 가능한 공고", &with_loan),
            ("예산을 넘는 공고", &over),
            ("금액 정보가 없는 공고", &unknown),
        ] {
            if list.is_empty() {
                continue;
            }
            out.push_str(&format!("\n\n[{title}] {}건", list.len()));
            for (i, (notice, why)) in list.iter().take(PER_SECTION).enumerate() {
                out.push('\n');
                out.push_str(&notice_block(i + 1, notice));
                out.push_str(&format!("\n   - 판단: {why}"));
            }
            if list.len() > PER_SECTION {
                out.push_str(&format!("\n(외 {}건)", list.len() - PER_SECTION));
            }
        }
        if notices.is_empty() {
            out.push_str("\n\n조건에 맞는 열린 공고가 없습니다 (no open notice matched).");
        }
        if !failures.is_empty() {
            notes.push(format!("조회하지 못한 출처: {}", failures.join(" / ")));
        }
        for note in notes {
            out.push_str("\n※ ");
            out.push_str(&note);
        }
        Ok(ToolResult::ok(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notice::NoticeAgency;
    use crate::profile::MemoryProfileStore;

    fn notice(deposit: Option<u64>, rent: Option<u64>, price: Option<u64>) -> Notice {
        Notice {
            id: "1".into(),
            title: "t".into(),
            kind: String::new(),
            region: "서울특별시".into(),
            posted: None,
            closes: None,
            status: "접수중".into(),
            url: None,
            source: NoticeAgency::Sh,
            deposit,
            monthly_rent: rent,
            price,
            sample: false,
        }
    }

    fn tool() -> HousingBudgetTool {
        HousingBudgetTool::new(Vec::new(), Arc::new(MemoryProfileStore::new()))
    }

    #[test]
    fn rentals_fit_on_deposit_and_monthly_cap() {
        let none = HousingProfile::default();
        let capped = HousingProfile {
            monthly_budget: Some(100_000),
            ..HousingProfile::default()
        };
        let t = tool();
        assert!(matches!(
            t.judge(&notice(Some(20_000_000), Some(98_000), None), 30_000_000.0, &none),
            Fit::Fits(_)
        ));
        assert!(matches!(
            t.judge(&notice(Some(40_000_000), None, None), 30_000_000.0, &none),
            Fit::Over(_)
        ));
        assert!(matches!(
            t.judge(
                &notice(Some(1_000_000), Some(150_000), None),
                30_000_000.0,
                &capped
            ),
            Fit::Over(_)
        ));
        assert_eq!(t.judge(&notice(None, None, None), 1.0, &none), Fit::Unknown);
    }

    #[test]
    fn sales_price_the_gap_as_the_reference_loan() {
        let t = tool();
        // Gap 100,000,000 at 4 % over 30 years: 477,415 a month.
        let cap_high = HousingProfile {
            monthly_budget: Some(500_000),
            ..HousingProfile::default()
        };
        let cap_low = HousingProfile {
            monthly_budget: Some(400_000),
            ..HousingProfile::default()
        };
        let sale = notice(None, None, Some(400_000_000));
        match t.judge(&sale, 300_000_000.0, &cap_high) {
            Fit::WithLoan(why) => assert!(why.contains("월 477,415원"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(t.judge(&sale, 300_000_000.0, &cap_low), Fit::Over(_)));
        assert!(matches!(t.judge(&sale, 400_000_000.0, &cap_low), Fit::Fits(_)));
        assert!(matches!(
            t.judge(&sale, 300_000_000.0, &HousingProfile::default()),
            Fit::WithLoan(_)
        ));
    }
}
