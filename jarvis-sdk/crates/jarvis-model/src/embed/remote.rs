//! What the HTTP embedders share: batching, blank texts, reading and
//! checking the response, normalising the vectors.

use serde_json::Value;
use std::future::Future;

use super::{EmbedRoles, normalize};
use crate::error::ProviderError;
use crate::http::{HttpClient, error_message, excerpt};

/// Embeds `texts` through `call`, at most `batch_size` texts per call.
///
/// Blank texts are not sent (services reject empty input): they get zero
/// vectors of the length the others have, or of `dimensions`; with nothing
/// else to go by, an empty vector. Every vector is checked to have the same
/// length (and `dimensions`, when given) and normalised to length 1.
pub(super) async fn embed_batched<F, Fut>(
    provider: &'static str,
    texts: Vec<String>,
    batch_size: usize,
    dimensions: Option<usize>,
    mut call: F,
) -> Result<Vec<Vec<f32>>, ProviderError>
where
    F: FnMut(Vec<String>) -> Fut,
    Fut: Future<Output = Result<Vec<Vec<f32>>, ProviderError>>,
{
    let total = texts.len();
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; total];
    let mut pending: Vec<(usize, String)> = texts
        .into_iter()
        .enumerate()
        .filter(|(_, t)| !t.trim().is_empty())
        .collect();
    let mut length = dimensions;
    let batch_size = batch_size.max(1);
    while !pending.is_empty() {
        let rest = pending.split_off(pending.len().min(batch_size));
        let (positions, batch): (Vec<usize>, Vec<String>) =
            std::mem::replace(&mut pending, rest).into_iter().unzip();
        let vectors = call(batch).await?;
        if vectors.len() != positions.len() {
            return Err(malformed(
                provider,
                format!("{} vectors for {} texts", vectors.len(), positions.len()),
            ));
        }
        for (position, mut vector) in positions.into_iter().zip(vectors) {
            match length {
                Some(n) if n != vector.len() => {
                    return Err(malformed(
                        provider,
                        format!("a vector of {} dimensions where {n} were expected", vector.len()),
                    ));
                }
                _ => length = Some(vector.len()),
            }
            normalize(&mut vector);
            slots[position] = Some(vector);
        }
    }
    let zero = vec![0.0; length.unwrap_or(0)];
    Ok(slots
        .into_iter()
        .map(|slot| slot.unwrap_or_else(|| zero.clone()))
        .collect())
}

/// POSTs `body` and reads the whole answer as JSON; an `error` member in a
/// success answer is an API error too.
pub(super) async fn post_for_json(
    client: &HttpClient,
    provider: &'static str,
    url: &str,
    headers: &[(&'static str, String, bool)],
    body: &Value,
) -> Result<Value, ProviderError> {
    let response = client.post_json(url, headers, body).await?;
    let bytes = response.bytes().await.map_err(|e| client.transport_error(e))?;
    let json: Value = serde_json::from_slice(&bytes).map_err(|e| {
        malformed(
            provider,
            format!(
                "not JSON ({e}): {}",
                excerpt(&String::from_utf8_lossy(&bytes), 120)
            ),
        )
    })?;
    if json.get("error").is_some_and(|e| !e.is_null()) {
        return Err(ProviderError::api(
            provider,
            None,
            error_message(&String::from_utf8_lossy(&bytes)),
        ));
    }
    Ok(json)
}

/// A non-empty list of finite numbers, as `f32`.
pub(super) fn vector(provider: &'static str, value: &Value, path: &str) -> Result<Vec<f32>, ProviderError> {
    let Some(items) = value.as_array() else {
        return Err(malformed(
            provider,
            format!("`{path}` is {}, not a list of numbers", kind(value)),
        ));
    };
    if items.is_empty() {
        return Err(malformed(provider, format!("`{path}` is an empty list")));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let number = item.as_f64().ok_or_else(|| {
                malformed(provider, format!("`{path}[{i}]` is {}, not a number", kind(item)))
            })?;
            let number = number as f32;
            if number.is_finite() {
                Ok(number)
            } else {
                Err(malformed(
                    provider,
                    format!("`{path}[{i}]` is out of range for a 32-bit float"),
                ))
            }
        })
        .collect()
}

/// A malformed embeddings response.
pub(super) fn malformed(provider: &'static str, what: String) -> ProviderError {
    ProviderError::stream(provider, format!("malformed embeddings response: {what}"))
}

/// What a JSON value is, for messages.
pub(super) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The name of a remote embedder's vector space
/// (`<provider>/<model>[/<dims>][+doc-<digest>]`, the digest naming how
/// documents are sent when they are not sent as they are), after checking
/// the model name and dimension count.
pub(super) fn space_name(
    provider: &str,
    model: &str,
    dimensions: Option<usize>,
    roles: &EmbedRoles,
) -> Result<String, ProviderError> {
    if model.trim().is_empty() {
        return Err(ProviderError::Config(format!(
            "{provider} embedder: the model name is empty"
        )));
    }
    let mut name = match dimensions {
        Some(0) => {
            return Err(ProviderError::Config(format!(
                "{provider} embedder: dimensions must be above 0"
            )));
        }
        Some(d) => format!("{provider}/{model}/{d}"),
        None => format!("{provider}/{model}"),
    };
    if let Some(suffix) = roles.space_suffix() {
        name.push('+');
        name.push_str(&suffix);
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vectors_are_lists_of_finite_numbers() {
        assert_eq!(
            vector("x", &json!([0.5, -1, 2e-3]), "v").unwrap(),
            [0.5, -1.0, 0.002]
        );
        let error = |v: Value| vector("x", &v, "data[0].embedding").unwrap_err().to_string();
        assert_eq!(
            error(json!("AAAA")),
            "x stream error: malformed embeddings response: `data[0].embedding` is a string, not a list of numbers"
        );
        assert_eq!(
            error(json!([0.1, "0.2"])),
            "x stream error: malformed embeddings response: `data[0].embedding[1]` is a string, not a number"
        );
        assert_eq!(
            error(json!([1e39])),
            "x stream error: malformed embeddings response: `data[0].embedding[0]` is out of range for a 32-bit float"
        );
        assert!(error(json!([])).ends_with("is an empty list"));
        assert!(error(Value::Null).contains("is null"));
    }

    #[tokio::test]
    async fn batches_keep_order_and_blank_texts_get_zero_vectors() {
        let texts: Vec<String> = ["a", "", "bb", "  ", "ccc"].map(String::from).into();
        let mut calls = Vec::new();
        let out = embed_batched("x", texts, 2, None, |batch| {
            calls.push(batch.clone());
            async move { Ok(batch.iter().map(|t| vec![t.len() as f32, 0.0]).collect()) }
        })
        .await
        .unwrap();
        assert_eq!(calls, [vec!["a", "bb"], vec!["ccc"]]);
        assert_eq!(
            out,
            [
                vec![1.0, 0.0],
                vec![0.0, 0.0],
                vec![1.0, 0.0],
                vec![0.0, 0.0],
                vec![1.0, 0.0]
            ]
        );
        let none = embed_batched("x", vec![String::new()], 2, None, |_| async { unreachable!() })
            .await
            .unwrap();
        assert_eq!(none, [Vec::<f32>::new()]);
    }

    #[tokio::test]
    async fn lengths_must_agree() {
        let texts: Vec<String> = ["a", "bb"].map(String::from).into();
        let error = embed_batched("x", texts.clone(), 1, None, |batch| async move {
            Ok(vec![vec![1.0; batch[0].len()]])
        })
        .await
        .unwrap_err();
        assert!(
            error
                .to_string()
                .ends_with("a vector of 2 dimensions where 1 were expected"),
            "{error}"
        );
        let error = embed_batched("x", texts, 8, Some(3), |_| async { Ok(vec![vec![1.0; 3]]) })
            .await
            .unwrap_err();
        assert!(error.to_string().ends_with("1 vectors for 2 texts"), "{error}");
    }
}
