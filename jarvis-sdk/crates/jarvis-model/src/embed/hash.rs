//! [`HashEmbedder`]: the offline default embedder. No model, no network:
//! words and their character n-grams are hashed into a fixed number of
//! dimensions (the "hashing trick"), so texts that share words or word
//! pieces get similar vectors.
//!
//! How a text becomes a vector:
//!
//! 1. **Normalise, tokenise, stem** as memory reads Korean and English
//!    (`common/words.rs`): NFKC and lower case, tokens split at spaces and
//!    where Hangul meets another script, Korean particles and endings and
//!    English suffixes stripped (`서울에서는` → `서울`, `running` → `run`).
//! 4. **Features** of each token: the word itself, its stem, and character
//!    n-grams of both with boundary markers (`<서울>` → `<서`, `서울`, `울>`,
//!    `<서울`, `서울>`): bigrams and trigrams for Hangul and other scripts
//!    without spaces, 3- to 5-grams for Latin letters and digits. N-grams
//!    lying wholly inside a stripped ending are left out, so particles alone
//!    do not make two texts alike. Each token's features are scaled to one
//!    unit of weight (function words such as `the` or `좀` to less), so a
//!    long word does not outweigh a short one.
//! 5. **Hash** each feature with FNV-1a and a 64-bit finaliser (fixed, so
//!    vectors are the same on every run, platform and Rust release) to a
//!    dimension and a sign (signed hashing keeps collisions from adding up
//!    in one direction), sum, and L2-normalise.
//!
//! It matches texts that share wording in another form (particles and
//! endings attached, inflections, word order, partial phrases); it cannot
//! match paraphrases that share no word. The provider embedders are for
//! that.

use super::{EmbedRole, Embedder, normalize};
use crate::error::ProviderError;
use futures::future::BoxFuture;
use jarvis_common::words::{Script, Token, TokenScratch, for_each_token};

/// The default number of dimensions of a [`HashEmbedder`].
pub const HASH_EMBEDDER_DIMENSIONS: usize = 512;

/// The feature scheme's version, part of [`Embedder::name`]; raise it when
/// a change gives different vectors, so stored vectors are recomputed.
const VERSION: u32 = 1;

/// Weight of a word or stem feature before the token is scaled.
const WORD_WEIGHT: f32 = 1.0;
/// Weight of one character n-gram before the token is scaled.
const GRAM_WEIGHT: f32 = 0.6;
/// The share of a function word (`the`, `좀`) against a content word's 1.
const STOPWORD_SHARE: f32 = 0.1;

/// An offline embedder: character n-gram feature hashing, deterministic,
/// for Korean and English (see the module documentation).
///
/// Embedding a short query takes a few microseconds. [`Embedder::embed`]
/// does its work when called, on the caller's thread; to embed many long
/// texts at once, call it from `tokio::task::spawn_blocking`.
///
/// ```
/// use jarvis_model::{HashEmbedder, cosine};
///
/// let embedder = HashEmbedder::default();
/// let query = embedder.embed_text("서울 공고");
/// let memory = embedder.embed_text("서울에서 새 공고를 찾아줘");
/// let other = embedder.embed_text("내일 아침 일곱 시에 깨워 줘");
/// assert!(cosine(&query, &memory) > cosine(&query, &other) + 0.3);
/// ```
#[derive(Debug, Clone)]
pub struct HashEmbedder {
    dimensions: usize,
    name: String,
}

impl Default for HashEmbedder {
    fn default() -> Self {
        Self::build(HASH_EMBEDDER_DIMENSIONS)
    }
}

impl HashEmbedder {
    /// The smallest number of dimensions accepted.
    pub const MIN_DIMENSIONS: usize = 16;
    /// The largest number of dimensions accepted.
    pub const MAX_DIMENSIONS: usize = 1 << 20;

    /// An embedder with [`HASH_EMBEDDER_DIMENSIONS`] dimensions.
    pub fn new() -> Self {
        Self::default()
    }

    /// An embedder with `dimensions` dimensions, between
    /// [`Self::MIN_DIMENSIONS`] and [`Self::MAX_DIMENSIONS`]. More
    /// dimensions mean fewer hash collisions and more memory per vector.
    pub fn with_dimensions(dimensions: usize) -> Result<Self, ProviderError> {
        if !(Self::MIN_DIMENSIONS..=Self::MAX_DIMENSIONS).contains(&dimensions) {
            return Err(ProviderError::Config(format!(
                "hash embedder: dimensions must be between {} and {}, not {dimensions}",
                Self::MIN_DIMENSIONS,
                Self::MAX_DIMENSIONS
            )));
        }
        Ok(Self::build(dimensions))
    }

    fn build(dimensions: usize) -> Self {
        Self {
            dimensions,
            name: format!("hash-v{VERSION}-{dimensions}"),
        }
    }

    /// The number of dimensions.
    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// Embeds one text: a unit vector, or zeros when the text has no letter
    /// or digit.
    pub fn embed_text(&self, text: &str) -> Vec<f32> {
        let mut vector = vec![0.0; self.dimensions];
        let mut scratch = Scratch::default();
        self.accumulate(text, &mut vector, &mut scratch);
        normalize(&mut vector);
        vector
    }

    fn accumulate(&self, text: &str, vector: &mut [f32], scratch: &mut Scratch) {
        let features = &mut scratch.features;
        for_each_token(text, &mut scratch.words, |token| {
            self.token(token, vector, features);
        });
    }

    /// Adds the features of `token`.
    fn token(&self, token: Token<'_>, vector: &mut [f32], features: &mut Vec<(u64, f32)>) {
        let Token {
            script,
            chars,
            stem,
            stem_prefix,
            stopword,
        } = token;
        let (low, high) = match script {
            Script::Alnum => (3, 5),
            Script::Hangul | Script::Dense => (2, 3),
        };
        features.clear();
        features.push((hash_word(chars), WORD_WEIGHT));
        let stemmed = stem != chars && !stem.is_empty();
        if stemmed {
            features.push((hash_word(stem), WORD_WEIGHT));
        }
        // N-grams of the token; with a stem, only those reaching into it.
        let keep_before = if stemmed { stem_prefix + 1 } else { usize::MAX };
        grams(chars, low, high, keep_before, features);
        if stemmed {
            grams(stem, low, high, usize::MAX, features);
        }
        features.sort_unstable_by_key(|f| f.0);
        let mut merged = 0;
        for i in 0..features.len() {
            if merged > 0 && features[merged - 1].0 == features[i].0 {
                features[merged - 1].1 += features[i].1;
            } else {
                features[merged] = features[i];
                merged += 1;
            }
        }
        features.truncate(merged);
        let norm = features.iter().map(|f| f.1 * f.1).sum::<f32>().sqrt();
        if norm == 0.0 {
            return;
        }
        let scale = if stopword { STOPWORD_SHARE } else { 1.0 } / norm;
        let dims = self.dimensions as u64;
        for &(hash, weight) in features.iter() {
            let index = (((hash >> 32) * dims) >> 32) as usize;
            let sign = if hash & 1 == 0 { 1.0 } else { -1.0 };
            vector[index] += sign * weight * scale;
        }
    }
}

impl Embedder for HashEmbedder {
    /// Symmetric: a query and a document with the same words get the same
    /// vector, whatever `role` says.
    fn embed(
        &self,
        texts: Vec<String>,
        _role: EmbedRole,
    ) -> BoxFuture<'static, Result<Vec<Vec<f32>>, ProviderError>> {
        let mut scratch = Scratch::default();
        let vectors = texts
            .iter()
            .map(|text| {
                let mut vector = vec![0.0; self.dimensions];
                self.accumulate(text, &mut vector, &mut scratch);
                normalize(&mut vector);
                vector
            })
            .collect();
        Box::pin(futures::future::ready(Ok(vectors)))
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn dimensions(&self) -> Option<usize> {
        Some(self.dimensions)
    }
}

/// Buffers reused across the tokens of one call.
#[derive(Default)]
struct Scratch {
    words: TokenScratch,
    features: Vec<(u64, f32)>,
}

/// Boundary markers around a word; outside any normalised text.
const START: char = '\u{2}';
const END: char = '\u{3}';

/// Pushes the `low..=high`-grams of `<word>` that start before position
/// `keep_before` of the marked word.
fn grams(word: &[char], low: usize, high: usize, keep_before: usize, out: &mut Vec<(u64, f32)>) {
    let len = word.len() + 2;
    let at = |i: usize| {
        if i == 0 {
            START
        } else if i == len - 1 {
            END
        } else {
            word[i - 1]
        }
    };
    for n in low..=high.min(len) {
        for start in 0..=(len - n) {
            if start >= keep_before {
                break;
            }
            let mut h = Fnv::new(b'g');
            for i in start..start + n {
                h.char(at(i));
            }
            out.push((h.finish(), GRAM_WEIGHT));
        }
    }
}

fn hash_word(word: &[char]) -> u64 {
    let mut h = Fnv::new(b'w');
    for &c in word {
        h.char(c);
    }
    h.finish()
}

/// FNV-1a (64 bit) over a kind byte and the chars' scalar values, finished
/// with the MurmurHash3 mixer so every output bit depends on every input bit.
struct Fnv(u64);

impl Fnv {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new(kind: u8) -> Self {
        let mut h = Fnv(Self::OFFSET);
        h.byte(kind);
        h
    }

    fn byte(&mut self, b: u8) {
        self.0 = (self.0 ^ u64::from(b)).wrapping_mul(Self::PRIME);
    }

    fn char(&mut self, c: char) {
        for b in (c as u32).to_le_bytes() {
            self.byte(b);
        }
    }

    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        x
    }
}
