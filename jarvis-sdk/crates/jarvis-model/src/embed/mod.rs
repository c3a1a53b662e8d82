//! Embeddings (R-MODEL-3): the [`Embedder`] trait, the offline
//! [`HashEmbedder`], the OpenAI-compatible and Ollama embedders, the
//! choice among them from the environment ([`EmbedConfig`]), what a text
//! is embedded as ([`EmbedRole`], [`EmbedRoles`]), and [`cosine`].
//!
//! Every embedder returns L2-normalised vectors (or zero vectors for texts
//! with nothing to embed), so similarity is a dot product. Vectors are only
//! comparable between embedders of the same [`Embedder::name`].

mod config;
mod hash;
#[cfg(feature = "ollama")]
mod ollama;
#[cfg(feature = "openai")]
mod openai;
#[cfg(any(feature = "openai", feature = "ollama"))]
mod remote;
mod roles;

use futures::future::BoxFuture;
use std::fmt::Debug;

use super::error::ProviderError;

pub use config::{
    EMBED_PROVIDER_ENV, EmbedConfig, EmbedProvider, OLLAMA_EMBED_BASE_URL, OLLAMA_EMBEDDING_MODEL,
    OPENAI_EMBEDDING_MODEL,
};
pub use hash::{HASH_EMBEDDER_DIMENSIONS, HashEmbedder};
#[cfg(feature = "ollama")]
pub use ollama::{OllamaEmbedder, OllamaEmbedderConfig};
#[cfg(feature = "openai")]
pub use openai::{OpenAiEmbedder, OpenAiEmbedderConfig};
pub use roles::{EmbedRole, EmbedRoles};

/// Turns texts into vectors for similarity search (memory recall).
///
/// Implementations are shared as `Arc<dyn Embedder>`. One call embeds a
/// batch of one [`EmbedRole`]: questions are embedded as
/// [`EmbedRole::Query`], what is kept to be found as
/// [`EmbedRole::Document`], and an embedder for an asymmetric model tells
/// its server which (see [`EmbedRoles`]). The answer holds one vector per
/// text, in the order of the texts, each L2-normalised (length 1) or all
/// zeros when a text has nothing to embed (empty, or only punctuation). An
/// empty batch gives an empty answer without any request.
pub trait Embedder: Send + Sync + Debug {
    /// Embeds `texts` as `role`, one vector per text, in order.
    fn embed(
        &self,
        texts: Vec<String>,
        role: EmbedRole,
    ) -> BoxFuture<'static, Result<Vec<Vec<f32>>, ProviderError>>;

    /// The name of the vector space: the embedder and its model, such as
    /// `hash-v1-512`, `openai/text-embedding-3-small` or `ollama/bge-m3`.
    /// Vectors from embedders with different names are not comparable, so a
    /// store keeps this name beside the vectors it holds.
    fn name(&self) -> &str;

    /// The length of every vector, when known before the first call.
    fn dimensions(&self) -> Option<usize> {
        None
    }
}

/// Helpers for every [`Embedder`].
pub trait EmbedderExt: Embedder {
    /// Embeds one text as `role`.
    fn embed_one(
        &self,
        text: impl Into<String>,
        role: EmbedRole,
    ) -> BoxFuture<'static, Result<Vec<f32>, ProviderError>> {
        let batch = self.embed(vec![text.into()], role);
        Box::pin(async move {
            let mut vectors = batch.await?;
            match (vectors.pop(), vectors.is_empty()) {
                (Some(vector), true) => Ok(vector),
                _ => Err(ProviderError::stream(
                    "embedder",
                    "the embedder did not return exactly one vector for one text",
                )),
            }
        })
    }
}

impl<E: Embedder + ?Sized> EmbedderExt for E {}

/// The cosine similarity of two vectors from the same embedder.
///
/// Embedders return unit vectors, so this is their dot product, in
/// `[-1, 1]`. A zero vector is similar to nothing (0), and so are vectors of
/// different lengths, which come from different spaces; the result is never
/// NaN.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    // Eight independent sums, so the compiler can use SIMD lanes (a single
    // running sum of floats must be added in order).
    let mut sums = [0.0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let (a_rest, b_rest) = (a_chunks.remainder(), b_chunks.remainder());
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..8 {
            sums[lane] += x[lane] * y[lane];
        }
    }
    let mut dot: f32 = sums.iter().sum();
    for (x, y) in a_rest.iter().zip(b_rest) {
        dot += x * y;
    }
    if dot.is_finite() {
        dot.clamp(-1.0, 1.0)
    } else {
        0.0
    }
}

/// Scales `vector` to length 1 in place; a zero vector stays zero.
pub(crate) fn normalize(vector: &mut [f32]) {
    let norm = vector
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 && norm.is_finite() {
        let scale = (1.0 / norm) as f32;
        for x in vector {
            *x *= scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_is_a_dot_product_and_never_nan() {
        let mut a = vec![3.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        normalize(&mut a);
        assert!((a[0] - 0.6).abs() < 1e-6 && (a[1] - 0.8).abs() < 1e-6);
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-6);
        let mut b = vec![0.0; 10];
        b[1] = 1.0;
        assert!((cosine(&a, &b) - 0.8).abs() < 1e-6);
        let zero = vec![0.0; 10];
        let mut still_zero = zero.clone();
        normalize(&mut still_zero);
        assert_eq!(still_zero, zero);
        assert_eq!(cosine(&a, &zero), 0.0);
        assert_eq!(cosine(&zero, &zero), 0.0);
        assert_eq!(cosine(&a, &a[..9]), 0.0, "different lengths");
        assert_eq!(cosine(&[], &[]), 0.0);
        assert_eq!(cosine(&[f32::NAN], &[1.0]), 0.0);
    }

    #[test]
    fn cosine_agrees_with_the_plain_sum_for_every_length() {
        for len in 0..40 {
            let a: Vec<f32> = (0..len).map(|i| ((i * 7 % 5) as f32 - 2.0) / 10.0).collect();
            let b: Vec<f32> = (0..len).map(|i| ((i * 3 % 4) as f32 - 1.5) / 10.0).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((cosine(&a, &b) - plain).abs() < 1e-5, "len {len}");
        }
    }
}
