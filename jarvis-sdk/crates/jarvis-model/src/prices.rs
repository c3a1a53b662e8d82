//! [`PriceTable`]: what model calls cost, from `$JARVIS_HOME/prices.yaml`.
//!
//! The file maps each model, by the name requests send, to its prices in
//! US dollars per million tokens:
//!
//! ```yaml
//! gpt-4o-mini: { input: 0.15, output: 0.60, cached_input: 0.075 }
//! claude-sonnet-4-5: { input: 3, output: 15, cached_input: 0.30 }
//! ```
//!
//! `cached_input` (the price of input read from the provider's prompt
//! cache) is optional: without it, cached input costs what other input
//! costs. A missing file is an empty table. A file that is not a map of
//! such entries (malformed YAML, a price that is negative or not a number,
//! an unknown key inside an entry) is an error that names the file.
//!
//! A model the table does not name has no price: its cost is unknown
//! (`None`), never zero.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::message::Usage;

/// The price table's file name under `JARVIS_HOME`.
pub const PRICES_FILE: &str = "prices.yaml";

/// Why the price table could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PriceError {
    /// The file exists but could not be read.
    #[error("prices: could not read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The file is not a price table.
    #[error("prices: {path} is not a valid price table: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the entry.
        reason: String,
    },
}

/// One model's prices, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Input tokens (those not read from the prompt cache).
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Input tokens read from the prompt cache; `None` charges them as
    /// `input`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
}

/// Prices by model name; see the module docs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    prices: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// An empty table: every cost is unknown.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the table at `path`; a missing file is an empty table.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, PriceError> {
        let path = path.as_ref();
        match std::fs::read_to_string(path) {
            Ok(text) => parse(&text, path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(PriceError::Io {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Parses a table from YAML text (errors name it `prices.yaml`).
    pub fn from_yaml(text: &str) -> Result<Self, PriceError> {
        parse(text, Path::new(PRICES_FILE))
    }

    /// Adds or replaces the prices of `model`.
    pub fn with_price(mut self, model: impl Into<String>, price: ModelPrice) -> Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// The prices of `model` (the name as requests send it), if known.
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        self.prices.get(model)
    }

    /// Every model with a price, by name.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.prices.keys().map(String::as_str)
    }

    /// Whether no model has a price.
    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    /// What `usage` of `model` cost in US dollars: input not read from the
    /// cache at `input`, cached input at `cached_input` (else `input`),
    /// output at `output`, each per million tokens. `None` when the model
    /// has no price (unknown, never 0).
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        let price = self.price(model)?;
        // Cached input is part of the input; a report that says otherwise
        // is read as all of it cached.
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let fresh = usage.input_tokens - cached;
        let dollars = fresh as f64 * price.input
            + cached as f64 * price.cached_input.unwrap_or(price.input)
            + usage.output_tokens as f64 * price.output;
        Some(dollars / 1e6)
    }
}

fn parse(text: &str, path: &Path) -> Result<PriceTable, PriceError> {
    let invalid = |reason: String| PriceError::Invalid {
        path: path.to_path_buf(),
        reason,
    };
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let entries = match value {
        serde_yaml::Value::Null => return Ok(PriceTable::default()),
        serde_yaml::Value::Mapping(entries) => entries,
        _ => {
            return Err(invalid(
                "the file must be a map of model names to {input, output, cached_input?}".into(),
            ));
        }
    };
    let mut prices = BTreeMap::new();
    for (key, entry) in entries {
        let serde_yaml::Value::String(model) = key else {
            return Err(invalid(format!(
                "the model name {} is not text; quote it",
                serde_yaml::to_string(&key).unwrap_or_default().trim()
            )));
        };
        let price: ModelPrice = serde_yaml::from_value(entry).map_err(|e| {
            invalid(format!(
                "`{model}`: {e} (an entry is {{input, output, cached_input?}} in USD per million tokens)"
            ))
        })?;
        let fields = [
            ("input", Some(price.input)),
            ("output", Some(price.output)),
            ("cached_input", price.cached_input),
        ];
        for (field, value) in fields {
            if let Some(value) = value
                && !(value.is_finite() && value >= 0.0)
            {
                return Err(invalid(format!(
                    "`{model}.{field}` is {value}; a price is a number of USD per million tokens, at least 0"
                )));
            }
        }
        prices.insert(model, price);
    }
    Ok(PriceTable { prices })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "
# USD per million tokens
big-model: { input: 2.5, output: 10, cached_input: 1.25 }
small-model:
  input: 0.5
  output: 1.5
";

    #[test]
    fn costs_follow_the_formula_exactly() {
        let table = PriceTable::from_yaml(TABLE).unwrap();
        // 800,000 fresh × 2.5 + 200,000 cached × 1.25 + 100,000 out × 10, per million.
        let usage = Usage::new(1_000_000, 100_000).with_cached_input(200_000);
        assert_eq!(table.cost("big-model", &usage), Some(3.25));
        // Without a cached price, cached input costs what input costs.
        assert_eq!(table.cost("small-model", &usage), Some(0.65));
        assert_eq!(table.cost("small-model", &Usage::default()), Some(0.0));
        assert_eq!(table.models().collect::<Vec<_>>(), ["big-model", "small-model"]);
    }

    #[test]
    fn a_model_without_a_price_has_no_cost_not_zero() {
        let table = PriceTable::from_yaml(TABLE).unwrap();
        assert_eq!(table.cost("other-model", &Usage::new(10, 10)), None);
        assert_eq!(PriceTable::new().cost("big-model", &Usage::new(1, 1)), None);
    }

    #[test]
    fn a_report_with_more_cached_than_input_is_read_as_all_cached() {
        let table = PriceTable::new().with_price(
            "m",
            ModelPrice {
                input: 4.0,
                output: 0.0,
                cached_input: Some(2.0),
            },
        );
        let usage = Usage::new(500_000, 0).with_cached_input(u64::MAX);
        assert_eq!(table.cost("m", &usage), Some(1.0));
    }

    #[test]
    fn a_missing_or_empty_file_is_an_empty_table() {
        let dir = tempfile::tempdir().unwrap();
        assert!(PriceTable::load(dir.path().join(PRICES_FILE)).unwrap().is_empty());
        std::fs::write(dir.path().join(PRICES_FILE), "# nothing priced yet\n").unwrap();
        assert!(PriceTable::load(dir.path().join(PRICES_FILE)).unwrap().is_empty());
    }

    #[test]
    fn bad_tables_are_refused_naming_the_file_and_the_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PRICES_FILE);
        for (text, expected) in [
            ("m: { input: 1, output: 2", "did not find expected"),
            ("- m", "must be a map of model names"),
            ("m: { input: -1, output: 2 }", "`m.input` is -1"),
            (
                "m: { input: 1, output: 2, cached_input: -0.5 }",
                "`m.cached_input` is -0.5",
            ),
            ("m: { input: .nan, output: 2 }", "`m.input` is NaN"),
            ("m: { input: \"3\", output: 2 }", "`m`: invalid type: string"),
            ("m: { input: 1 }", "`m`: missing field `output`"),
            (
                "m: { input: 1, output: 2, cache: 1 }",
                "`m`: unknown field `cache`",
            ),
            ("m: 3", "`m`: invalid type"),
            ("1.5: { input: 1, output: 2 }", "model name 1.5 is not text"),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = PriceTable::load(&path).unwrap_err().to_string();
            assert!(error.contains(&path.display().to_string()), "{text}: {error}");
            assert!(error.contains(expected), "{text}: {error}");
        }
        let error = PriceTable::from_yaml("m: { input: x, output: 1 }").unwrap_err();
        assert!(error.to_string().starts_with("prices: prices.yaml"), "{error}");
    }
}
