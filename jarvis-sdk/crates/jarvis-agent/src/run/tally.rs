//! [`UsageTally`]: what a turn and everything it starts (sub-agents,
//! delegations) spend, in tokens and dollars, and the [`Budget`] that
//! bounds it.
//!
//! Every model call of a turn is recorded in the turn's tally, which adds
//! it to its own total and to every ancestor's: a sub-agent's or a
//! delegated turn's tally is a child of the caller's. So a parent's
//! `usage_total` includes its children, and a child's limits are its own
//! *and* whatever its ancestors have left: a child can never spend more
//! than its parent has left (the parent reserves for it by lending it the
//! rest of its own allowance).
//!
//! Tokens are input plus output tokens. A dollar limit counts only while
//! every call so far has a price; when one has none, the dollar limit is
//! not enforced and that is logged once per turn.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use jarvis_model::{PriceTable, Usage};

/// Limits in tokens (input plus output) and in US dollars, per turn, per
/// session and per agent per day. `None` is unlimited; all are by default.
///
/// A definition's `budget:` key; the defaults come from
/// `JARVIS_BUDGET__<KEY>` (`JARVIS_BUDGET__TURN_TOKENS`, …).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Tokens one turn may use, its sub-agents and delegations included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_tokens: Option<u64>,
    /// Tokens all turns of one session may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_tokens: Option<u64>,
    /// Tokens the agent may use per day (the person's day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day_tokens: Option<u64>,
    /// Dollars one turn may cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_usd: Option<f64>,
    /// Dollars all turns of one session may cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_usd: Option<f64>,
    /// Dollars the agent may cost per day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day_usd: Option<f64>,
}

impl Budget {
    /// The names of the keys, as written in definitions (and, upper-cased,
    /// after `JARVIS_BUDGET__`).
    pub const KEYS: [&'static str; 6] = [
        "turn_tokens",
        "session_tokens",
        "day_tokens",
        "turn_usd",
        "session_usd",
        "day_usd",
    ];

    /// Whether every limit is unset.
    pub fn is_unlimited(&self) -> bool {
        *self == Budget::default()
    }

    /// Each limit of `self`, or `defaults`' where `self` has none.
    pub fn or(self, defaults: Budget) -> Budget {
        Budget {
            turn_tokens: self.turn_tokens.or(defaults.turn_tokens),
            session_tokens: self.session_tokens.or(defaults.session_tokens),
            day_tokens: self.day_tokens.or(defaults.day_tokens),
            turn_usd: self.turn_usd.or(defaults.turn_usd),
            session_usd: self.session_usd.or(defaults.session_usd),
            day_usd: self.day_usd.or(defaults.day_usd),
        }
    }

    /// Checks the values: dollar limits are finite and not negative.
    pub fn validate(&self) -> Result<(), String> {
        for (key, value) in [
            ("turn_usd", self.turn_usd),
            ("session_usd", self.session_usd),
            ("day_usd", self.day_usd),
        ] {
            if let Some(v) = value
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(format!("budget.{key} must be a number of dollars, 0 or more"));
            }
        }
        Ok(())
    }
}

/// One limit a tally stops at: what is left of it when the tally starts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Allowance {
    /// Tokens left.
    pub tokens: Option<u64>,
    /// Dollars left.
    pub usd: Option<f64>,
    /// What the limit is, for the wrap-up instruction and the person
    /// (`"the turn budget of 1000 tokens"`).
    pub name: &'static str,
}

/// A turn's total, its children included: the `usage_total` of `agent_end`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotal {
    /// Tokens read, cached ones included.
    pub input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
    /// The part of the input read from a prompt cache.
    pub cached_input_tokens: u64,
    /// Whether any count was estimated.
    pub estimated: bool,
    /// The cost in US dollars; `null` when a model called has no price.
    pub cost_usd: Option<f64>,
}

#[derive(Debug, Default)]
struct State {
    usage: Usage,
    cost: f64,
    unpriced: bool,
}

/// Which limit a tally (or an ancestor) reached, in words.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetReached {
    /// The limit, for example `turn budget of 1000 tokens`.
    pub limit: String,
}

/// What one turn spends, its children included (see the module docs).
#[derive(Debug)]
pub struct UsageTally {
    parent: Option<Arc<UsageTally>>,
    prices: Option<Arc<PriceTable>>,
    allowances: Vec<Allowance>,
    state: Mutex<State>,
    warned_unpriced: AtomicBool,
}

impl UsageTally {
    /// A top-level tally pricing calls with `prices` (none: every cost is
    /// unknown) and stopping at `allowances`.
    pub fn new(prices: Option<Arc<PriceTable>>, allowances: Vec<Allowance>) -> Arc<Self> {
        Arc::new(Self {
            parent: None,
            prices,
            allowances,
            state: Mutex::default(),
            warned_unpriced: AtomicBool::new(false),
        })
    }

    /// A child tally (a sub-agent's run, a delegated turn) with its own
    /// `allowances` besides every ancestor's.
    pub fn child(self: &Arc<Self>, allowances: Vec<Allowance>) -> Arc<Self> {
        Arc::new(Self {
            parent: Some(self.clone()),
            prices: self.prices.clone(),
            allowances,
            state: Mutex::default(),
            warned_unpriced: AtomicBool::new(false),
        })
    }

    /// Records one model call of `model` that used `usage`, here and in
    /// every ancestor.
    pub fn record(&self, model: &str, usage: Usage) {
        let cost = self.prices.as_ref().and_then(|p| p.cost(model, &usage));
        let mut tally = Some(self);
        while let Some(t) = tally {
            {
                let mut state = t.state.lock().unwrap_or_else(|e| e.into_inner());
                state.usage += usage;
                match cost {
                    Some(c) => state.cost += c,
                    None => state.unpriced = true,
                }
            }
            tally = t.parent.as_deref();
        }
    }

    /// The total so far, children included.
    pub fn total(&self) -> UsageTotal {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        UsageTotal {
            input_tokens: state.usage.input_tokens,
            output_tokens: state.usage.output_tokens,
            cached_input_tokens: state.usage.cached_input_tokens,
            estimated: state.usage.estimated,
            cost_usd: (!state.unpriced).then_some(state.cost),
        }
    }

    /// The first limit reached, here or in an ancestor.
    pub fn reached(&self) -> Option<BudgetReached> {
        let mut tally = Some(self);
        while let Some(t) = tally {
            if let Some(hit) = t.own_reached() {
                return Some(hit);
            }
            tally = t.parent.as_deref();
        }
        None
    }

    fn own_reached(&self) -> Option<BudgetReached> {
        if self.allowances.is_empty() {
            return None;
        }
        let (tokens, cost, unpriced) = {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            (
                state.usage.input_tokens.saturating_add(state.usage.output_tokens),
                state.cost,
                state.unpriced,
            )
        };
        for allowance in &self.allowances {
            if let Some(limit) = allowance.tokens
                && tokens >= limit
            {
                return Some(BudgetReached {
                    limit: format!("{} ({limit} tokens)", allowance.name),
                });
            }
            if let Some(limit) = allowance.usd {
                if unpriced {
                    if !self.warned_unpriced.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            limit = allowance.name,
                            "a model of this turn has no price in prices.yaml: the dollar budget is not enforced"
                        );
                    }
                } else if cost >= limit {
                    return Some(BudgetReached {
                        limit: format!("{} (${limit:.4})", allowance.name),
                    });
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_add_to_their_ancestors_and_stop_at_what_they_have_left() {
        let prices = Arc::new(PriceTable::from_yaml("m: {input: 1000000, output: 2000000}").unwrap());
        let turn = UsageTally::new(
            Some(prices),
            vec![Allowance {
                tokens: Some(100),
                usd: None,
                name: "the turn budget",
            }],
        );
        let sub = turn.child(Vec::new());
        turn.record("m", Usage::new(30, 10));
        assert_eq!(sub.reached(), None);
        sub.record("m", Usage::new(50, 5));
        assert_eq!(turn.total().input_tokens, 80);
        assert_eq!(turn.total().output_tokens, 15);
        assert_eq!(turn.total().cost_usd, Some(80.0 + 30.0));
        assert_eq!(sub.total().input_tokens, 50);
        assert_eq!(sub.reached(), None, "95 of 100");
        sub.record("m", Usage::new(5, 0));
        assert!(
            sub.reached().unwrap().limit.contains("the turn budget"),
            "the parent's remainder binds the child"
        );
        assert!(turn.reached().is_some());
    }

    #[test]
    fn an_unpriced_model_makes_the_cost_unknown_and_the_dollar_limit_unenforced() {
        let prices = Arc::new(PriceTable::from_yaml("m: {input: 1, output: 1}").unwrap());
        let turn = UsageTally::new(
            Some(prices),
            vec![Allowance {
                tokens: None,
                usd: Some(0.0),
                name: "the turn budget",
            }],
        );
        turn.record("m", Usage::new(1, 1));
        assert!(turn.reached().is_some(), "priced: $0 reached");
        turn.record("other", Usage::new(1, 1));
        assert_eq!(turn.total().cost_usd, None, "unknown, never zero");
        assert_eq!(turn.reached(), None, "not enforced with unknown prices");
    }

    #[test]
    fn budgets_fall_back_key_by_key_and_refuse_bad_dollars() {
        let own = Budget {
            turn_tokens: Some(5),
            ..Budget::default()
        };
        let env = Budget {
            turn_tokens: Some(9),
            day_usd: Some(1.5),
            ..Budget::default()
        };
        let merged = own.or(env);
        assert_eq!((merged.turn_tokens, merged.day_usd), (Some(5), Some(1.5)));
        assert!(Budget::default().is_unlimited());
        let bad = Budget {
            session_usd: Some(-1.0),
            ..Budget::default()
        };
        assert!(bad.validate().unwrap_err().contains("session_usd"));
        assert!(serde_yaml::from_str::<Budget>("turn_tokns: 3").is_err());
    }
}
