//! `housing_loan`: amortisation of a housing loan by the three repayment
//! methods Korean lenders offer, with monthly compounding at a fixed rate.
//!
//! With `P` the principal, `r` the monthly rate (annual % ÷ 12 ÷ 100) and
//! `n` the number of months:
//!
//! - **equal payment** (원리금균등): every month pays
//!   `M = P·r·(1+r)^n / ((1+r)^n − 1)` (`P / n` when `r = 0`); the interest
//!   part falls and the principal part grows;
//! - **equal principal** (원금균등): every month repays `P / n` of principal
//!   plus the interest on what is still owed, so payments fall;
//! - **bullet** (만기일시): every month pays the interest `P·r`; the whole
//!   principal is repaid with the last payment.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

use super::error::HousingError;
use super::format::won;
use jarvis_sdk::agent::{ToolContext, ToolError, ToolResult, TypedTool};

/// The largest principal accepted: 1,000억 원.
pub const MAX_PRINCIPAL: f64 = 100_000_000_000.0;
/// The longest term accepted, in years.
pub const MAX_YEARS: u32 = 50;

/// How a loan is repaid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RepaymentMethod {
    /// 원리금균등: the same payment every month.
    #[serde(alias = "원리금균등", alias = "원리금균등상환")]
    EqualPayment,
    /// 원금균등: the same principal every month plus falling interest.
    #[serde(alias = "원금균등", alias = "원금균등상환")]
    EqualPrincipal,
    /// 만기일시: interest only, the principal at the end.
    #[serde(alias = "만기일시", alias = "만기일시상환")]
    Bullet,
}

impl RepaymentMethod {
    /// The Korean name of the method.
    pub fn korean_name(self) -> &'static str {
        match self {
            RepaymentMethod::EqualPayment => "원리금균등상환",
            RepaymentMethod::EqualPrincipal => "원금균등상환",
            RepaymentMethod::Bullet => "만기일시상환",
        }
    }
}

/// A loan to amortise; built only through [`LoanTerms::new`], which checks
/// every value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoanTerms {
    principal: f64,
    annual_rate_percent: f64,
    years: u32,
    method: RepaymentMethod,
}

impl LoanTerms {
    /// Checked terms: a principal above 0 and at most [`MAX_PRINCIPAL`]
    /// won, a yearly rate from 0 to 100 %, a whole number of years from 1 to
    /// [`MAX_YEARS`].
    pub fn new(
        principal: f64,
        annual_rate_percent: f64,
        years: f64,
        method: RepaymentMethod,
    ) -> Result<Self, HousingError> {
        if !principal.is_finite() || principal <= 0.0 {
            return Err(HousingError::Invalid(format!(
                "principal must be a positive amount in won (대출 원금은 0보다 커야 합니다), got {principal}"
            )));
        }
        if principal > MAX_PRINCIPAL {
            return Err(HousingError::Invalid(format!(
                "principal must be at most {} (대출 원금이 너무 큽니다), got {}",
                won(MAX_PRINCIPAL),
                won(principal)
            )));
        }
        if !annual_rate_percent.is_finite() || !(0.0..=100.0).contains(&annual_rate_percent) {
            return Err(HousingError::Invalid(format!(
                "annual_rate_percent must be between 0 and 100 (연 이자율은 0~100%), got {annual_rate_percent}"
            )));
        }
        if !years.is_finite() || years.fract() != 0.0 || !(1.0..=f64::from(MAX_YEARS)).contains(&years) {
            return Err(HousingError::Invalid(format!(
                "years must be a whole number from 1 to {MAX_YEARS} (대출 기간은 1~{MAX_YEARS}년), got {years}"
            )));
        }
        Ok(Self {
            principal,
            annual_rate_percent,
            years: years as u32,
            method,
        })
    }

    /// The principal in won.
    pub fn principal(&self) -> f64 {
        self.principal
    }

    /// The yearly rate in percent.
    pub fn annual_rate_percent(&self) -> f64 {
        self.annual_rate_percent
    }

    /// The term in years.
    pub fn years(&self) -> u32 {
        self.years
    }

    /// The repayment method.
    pub fn method(&self) -> RepaymentMethod {
        self.method
    }

    /// The number of monthly payments.
    pub fn months(&self) -> u32 {
        self.years * 12
    }

    /// The monthly rate as a fraction (4 % a year → 0.00333…).
    pub fn monthly_rate(&self) -> f64 {
        self.annual_rate_percent / 12.0 / 100.0
    }
}

/// One month of a schedule, in won (unrounded).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoanMonth {
    /// 1 for the first payment.
    pub month: u32,
    /// What is paid this month.
    pub payment: f64,
    /// The part of it that repays principal.
    pub principal: f64,
    /// The part of it that is interest.
    pub interest: f64,
    /// Principal still owed after this payment.
    pub balance: f64,
}

/// A full repayment schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct LoanSchedule {
    /// The loan.
    pub terms: LoanTerms,
    /// Every month, first to last.
    pub months: Vec<LoanMonth>,
}

impl LoanSchedule {
    /// The first month's payment.
    pub fn first_payment(&self) -> f64 {
        self.months.first().map_or(0.0, |m| m.payment)
    }

    /// The last month's payment.
    pub fn last_payment(&self) -> f64 {
        self.months.last().map_or(0.0, |m| m.payment)
    }

    /// All interest paid.
    pub fn total_interest(&self) -> f64 {
        self.months.iter().map(|m| m.interest).sum()
    }

    /// All payments: principal plus interest.
    pub fn total_paid(&self) -> f64 {
        self.months.iter().map(|m| m.payment).sum()
    }

    /// The schedule in Korean: the terms, first and last payments, totals,
    /// the first three months and the last, then the same figures as plain
    /// integers.
    pub fn to_korean(&self) -> String {
        let t = &self.terms;
        let mut out = String::new();
        let _ = writeln!(out, "대출 계산 결과 ({})", t.method.korean_name());
        let _ = writeln!(
            out,
            "- 대출 원금: {} | 연 이자율: {}% | 기간: {}년 ({}개월)",
            won(t.principal),
            t.annual_rate_percent,
            t.years,
            t.months()
        );
        let _ = writeln!(
            out,
            "- 첫 달 상환액: {} | 마지막 달 상환액: {}",
            won(self.first_payment()),
            won(self.last_payment())
        );
        let _ = writeln!(
            out,
            "- 총 이자: {} | 총 상환액: {}",
            won(self.total_interest()),
            won(self.total_paid())
        );
        let _ = writeln!(out, "상환 일정 요약:");
        let n = self.months.len();
        for (i, m) in self.months.iter().enumerate() {
            if i < 3 || i + 1 == n {
                if i >= 3 && n > 4 {
                    let _ = writeln!(out, "- …");
                }
                let _ = writeln!(
                    out,
                    "- {}개월차: {} (원금 {} + 이자 {}), 남은 원금 {}",
                    m.month,
                    won(m.payment),
                    won(m.principal),
                    won(m.interest),
                    won(m.balance)
                );
            }
        }
        let _ = writeln!(
            out,
            "※ 고정 금리, 월 복리(연 이자율 ÷ 12) 기준의 계산입니다. 실제 대출은 금리 변동, 거치 기간, 수수료에 따라 달라집니다."
        );
        let _ = write!(
            out,
            "(수치: first_payment={}, last_payment={}, total_interest={}, total_paid={})",
            self.first_payment().round(),
            self.last_payment().round(),
            self.total_interest().round(),
            self.total_paid().round()
        );
        out
    }
}

/// The whole schedule of `terms`.
pub fn amortize(terms: &LoanTerms) -> LoanSchedule {
    let n = terms.months();
    let r = terms.monthly_rate();
    let p = terms.principal;
    let mut months = Vec::with_capacity(n as usize);
    let mut balance = p;
    let level_payment = if r == 0.0 {
        p / f64::from(n)
    } else {
        let growth = (1.0 + r).powi(n as i32);
        p * r * growth / (growth - 1.0)
    };
    for month in 1..=n {
        let interest = balance * r;
        let principal = match terms.method {
            RepaymentMethod::EqualPayment => level_payment - interest,
            RepaymentMethod::EqualPrincipal => p / f64::from(n),
            RepaymentMethod::Bullet => 0.0,
        };
        // The last month repays exactly what is left, so rounding in the
        // floating-point steps never leaves a remainder.
        let principal = if month == n {
            balance
        } else {
            principal.min(balance)
        };
        balance -= principal;
        if month == n {
            balance = 0.0;
        }
        months.push(LoanMonth {
            month,
            payment: principal + interest,
            principal,
            interest,
            balance,
        });
    }
    LoanSchedule {
        terms: *terms,
        months,
    }
}

/// Arguments of `housing_loan`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct HousingLoanArgs {
    /// The amount borrowed, in won (e.g. 100000000 for 1억 원).
    pub principal: f64,
    /// The yearly interest rate in percent (e.g. 4 for 4 %).
    pub annual_rate_percent: f64,
    /// The term in whole years, 1 to 50.
    pub years: f64,
    /// equal_payment (원리금균등), equal_principal (원금균등) or bullet (만기일시).
    pub method: RepaymentMethod,
}

/// `housing_loan {principal, annual_rate_percent, years, method}`: monthly
/// payments, total interest and a schedule summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct HousingLoanTool;

#[async_trait]
impl TypedTool for HousingLoanTool {
    type Args = HousingLoanArgs;

    fn name(&self) -> &str {
        "housing_loan"
    }

    /// One agent's domain: only agents that list it have it.
    fn agent_only(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "Computes a housing loan's monthly payments (대출 계산): principal in won, yearly rate in %, \
         whole years, and the repayment method: equal_payment (원리금균등), equal_principal (원금균등) \
         or bullet (만기일시). Returns the first and last monthly payment, total interest, total paid \
         and a short schedule, in Korean with amounts in 원."
    }

    async fn run(&self, args: HousingLoanArgs, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        match LoanTerms::new(args.principal, args.annual_rate_percent, args.years, args.method) {
            Ok(terms) => Ok(ToolResult::ok(amortize(&terms).to_korean())),
            Err(e) => Ok(ToolResult::error(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(p: f64, rate: f64, years: f64, method: RepaymentMethod) -> LoanSchedule {
        amortize(&LoanTerms::new(p, rate, years, method).unwrap())
    }

    #[test]
    fn balances_reach_zero_and_parts_add_up() {
        for method in [
            RepaymentMethod::EqualPayment,
            RepaymentMethod::EqualPrincipal,
            RepaymentMethod::Bullet,
        ] {
            let s = schedule(123_456_789.0, 5.25, 17.0, method);
            assert_eq!(s.months.len(), 204);
            assert_eq!(s.months.last().unwrap().balance, 0.0);
            let repaid: f64 = s.months.iter().map(|m| m.principal).sum();
            assert!((repaid - 123_456_789.0).abs() < 1e-3, "{method:?}: {repaid}");
            assert!((s.total_paid() - s.total_interest() - 123_456_789.0).abs() < 1e-3);
            for m in &s.months {
                assert!((m.payment - m.principal - m.interest).abs() < 1e-6);
                assert!(m.balance >= 0.0);
            }
        }
    }

    #[test]
    fn the_summary_shows_three_months_an_ellipsis_and_the_last() {
        let text = schedule(100_000_000.0, 4.0, 30.0, RepaymentMethod::EqualPayment).to_korean();
        assert!(text.contains("- 1개월차: 477,415원"), "{text}");
        assert!(text.contains("- 3개월차:"), "{text}");
        assert!(!text.contains("- 4개월차:"), "{text}");
        assert!(text.contains("- …\n- 360개월차:"), "{text}");
        let short = schedule(1_200_000.0, 0.0, 1.0, RepaymentMethod::EqualPrincipal).to_korean();
        assert!(short.contains("- 12개월차: 100,000원"), "{short}");
    }
}
