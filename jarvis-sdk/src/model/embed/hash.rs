//! [`HashEmbedder`]: the offline default embedder. No model, no network:
//! words and their character n-grams are hashed into a fixed number of
//! dimensions (the "hashing trick"), so texts that share words or word
//! pieces get similar vectors.
//!
//! How a text becomes a vector:
//!
//! 1. **Normalise**: Unicode NFKC (composes Hangul jamo, folds full-width
//!    letters), lower case, everything but letters, digits and combining
//!    marks becomes a space.
//! 2. **Tokenise** on spaces, and again where Hangul meets another script
//!    (`lh공고` → `lh`, `공고`). A Hangul run that is only a particle after
//!    another script (`sh에서`) is dropped.
//! 3. **Stem** lightly: Korean particles and common verb endings are
//!    stripped (`서울에서는` → `서울`, `정리해줘` → `정리`, `찾아줘` → `찾`),
//!    English suffixes too (`running` → `run`, `applied` → `apply`,
//!    `saved` → `sav`).
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

use futures::future::BoxFuture;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

use super::{Embedder, normalize};
use crate::model::error::ProviderError;

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
/// use jarvis_sdk::{HashEmbedder, cosine};
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
        normalize_text(text, &mut scratch.text);
        let text = std::mem::take(&mut scratch.text);
        for word in text.split(' ').filter(|w| !w.is_empty()) {
            let mut previous: Option<Script> = None;
            let mut chars = word.chars().peekable();
            while let Some(first) = chars.next() {
                let script = Script::of(first);
                scratch.token.clear();
                scratch.token.push(first);
                while let Some(&next) = chars.peek() {
                    if Script::of(next) != script && !(is_combining_mark(next)) {
                        break;
                    }
                    scratch.token.push(next);
                    chars.next();
                }
                let after_other_script = previous.is_some();
                previous = Some(script);
                if script == Script::Hangul && after_other_script && is_particle(&scratch.token) {
                    continue; // `sh에서`: the particle of a Latin word
                }
                self.token(script, vector, scratch);
            }
        }
        scratch.text = text;
    }

    /// Adds the features of `scratch.token`.
    fn token(&self, script: Script, vector: &mut [f32], scratch: &mut Scratch) {
        let token = &scratch.token;
        let stem_len = match script {
            Script::Hangul => korean_stem_len(token),
            Script::Alnum => english_stem_len(token, &mut scratch.stem),
            Script::Dense => token.len(),
        };
        // The English stem may end differently from the token (`applied` →
        // `apply`); elsewhere it is a prefix.
        if script != Script::Alnum {
            scratch.stem.clear();
            scratch.stem.extend_from_slice(&token[..stem_len]);
        }
        let stem = &scratch.stem;
        let stopword = is_stopword(token) || is_stopword(stem);
        let (low, high) = match script {
            Script::Alnum => (3, 5),
            Script::Hangul | Script::Dense => (2, 3),
        };
        let features = &mut scratch.features;
        features.clear();
        features.push((hash_word(token), WORD_WEIGHT));
        let stemmed = stem.as_slice() != token.as_slice() && !stem.is_empty();
        if stemmed {
            features.push((hash_word(stem), WORD_WEIGHT));
        }
        // N-grams of the token; with a stem, only those reaching into it.
        let keep_before = if stemmed && script != Script::Alnum {
            stem_len + 1
        } else if stemmed {
            common_prefix(token, stem) + 1
        } else {
            usize::MAX
        };
        grams(token, low, high, keep_before, features);
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
    fn embed(&self, texts: Vec<String>) -> BoxFuture<'static, Result<Vec<Vec<f32>>, ProviderError>> {
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
    text: String,
    token: Vec<char>,
    stem: Vec<char>,
    features: Vec<(u64, f32)>,
}

/// Writing systems that tokenise differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    /// Hangul syllables and jamo.
    Hangul,
    /// Scripts written without spaces: Han, kana, Thai.
    Dense,
    /// Letters of other scripts (Latin, Greek, Cyrillic, …) and digits.
    Alnum,
}

impl Script {
    fn of(c: char) -> Script {
        match c as u32 {
            0xAC00..=0xD7A3 | 0x1100..=0x11FF | 0x3130..=0x318F | 0xA960..=0xA97F | 0xD7B0..=0xD7FF => {
                Script::Hangul
            }
            0x0E00..=0x0EFF
            | 0x3040..=0x30FF
            | 0x3400..=0x4DBF
            | 0x4E00..=0x9FFF
            | 0xF900..=0xFAFF
            | 0x20000..=0x3FFFF => Script::Dense,
            _ => Script::Alnum,
        }
    }
}

/// Lower case; letters, digits and combining marks kept, the rest spaces.
fn normalize_text(text: &str, out: &mut String) {
    out.clear();
    out.reserve(text.len());
    if text.is_ascii() {
        out.extend(text.bytes().map(|b| {
            if b.is_ascii_alphanumeric() {
                b.to_ascii_lowercase() as char
            } else {
                ' '
            }
        }));
        return;
    }
    for c in text.nfkc() {
        if c.is_alphanumeric() || is_combining_mark(c) {
            out.extend(c.to_lowercase());
        } else {
            out.push(' ');
        }
    }
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

fn common_prefix(a: &[char], b: &[char]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn ends_with(word: &[char], suffix: &str) -> bool {
    let n = suffix.chars().count();
    word.len() >= n && word[word.len() - n..].iter().copied().eq(suffix.chars())
}

/// Korean particles (조사), separated by spaces.
const PARTICLES: &str = concat!(
    "에서부터 으로부터 로부터 에게서 한테서 께서는 께서도 에서는 에서도 에서의 에게는 에게도 ",
    "한테는 으로는 으로도 으로서 으로써 까지는 까지도 부터는 부터도 이라도 이라는 ",
    "이라고 이랑은 에서 에게 한테 께서 으로 에는 에도 에의 와는 과는 와도 과도 로는 로도 ",
    "로서 로써 까지 부터 처럼 보다 마다 조차 마저 밖에 이나 이며 이고 이랑 이든 ",
    "라는 라고 라도 하고 은 는 이 가 을 를 의 에 도 만 로 와 과 께 랑 나 든 ",
);

/// Common verb endings (어미), mostly of `하다` verbs and requests,
/// separated by spaces.
const ENDINGS: &str = concat!(
    "해주세요 해주실래요 했습니다 하겠습니다 되었습니다 됐습니다 아주세요 어주세요 해줄래 해줘요 ",
    "하세요 합니다 했어요 했었다 하려고 하려면 해야 되었다 아줄래 어줄래 아줘요 ",
    "어줘요 았어요 었어요 습니다 으세요 해줘 했어 했다 했던 하는 하기 하면 해서 하여 한다 ",
    "해요 하다 하지 하게 된다 되는 됐다 되어 아줘 어줘 았다 었다 았어 었어 았던 ",
    "었던 는다 니다 세요 아서 어서 으면 려고 해 할 한 줘 죠 요 다 고 기 게 지 면 ",
);

/// The word lists as sets, built once.
struct Lexicon {
    /// Particles and endings by their last syllable, longest first, with
    /// whether each is a particle.
    suffixes: HashMap<char, Vec<(Vec<char>, bool)>>,
    particles: HashSet<Vec<char>>,
    stopwords: HashSet<Vec<char>>,
}

fn lexicon() -> &'static Lexicon {
    static LEXICON: OnceLock<Lexicon> = OnceLock::new();
    LEXICON.get_or_init(|| {
        let mut suffixes: HashMap<char, Vec<(Vec<char>, bool)>> = HashMap::new();
        let tagged = PARTICLES
            .split_whitespace()
            .map(|p| (p, true))
            .chain(ENDINGS.split_whitespace().map(|e| (e, false)));
        for (s, particle) in tagged {
            let chars: Vec<char> = s.chars().collect();
            suffixes
                .entry(chars[chars.len() - 1])
                .or_default()
                .push((chars, particle));
        }
        for list in suffixes.values_mut() {
            list.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
        }
        let set = |words: &str| words.split_whitespace().map(|w| w.chars().collect()).collect();
        Lexicon {
            suffixes,
            particles: set(PARTICLES),
            stopwords: set(STOPWORDS),
        }
    })
}

fn is_particle(word: &[char]) -> bool {
    lexicon().particles.contains(word)
}

/// The length of the stem of a Hangul word: the longest particle or ending
/// stripped, then one more particle (`서울에서는` → `서울`), at least one
/// syllable left, two before a one-syllable ending (`공고` stays).
fn korean_stem_len(word: &[char]) -> usize {
    let suffixes = &lexicon().suffixes;
    let mut len = word.len();
    for pass in 0..2 {
        let stem = &word[..len];
        let Some(candidates) = stem.last().and_then(|last| suffixes.get(last)) else {
            break;
        };
        let fits = |(suffix, particle): &&(Vec<char>, bool)| {
            let min_stem = if !particle && suffix.len() == 1 { 2 } else { 1 };
            (pass == 0 || *particle) && stem.len() >= suffix.len() + min_stem && stem.ends_with(suffix)
        };
        match candidates.iter().find(fits) {
            Some((suffix, _)) => len -= suffix.len(),
            None => break,
        }
    }
    len
}

/// Writes the stem of a Latin word into `stem` and returns how many leading
/// characters it shares with the word: plural, `-ed`, `-ing` and `-ly`
/// stripped, `-ies`/`-ied` to `-y`, a doubled final consonant undoubled and
/// a final `e` dropped (`saves`, `saved`, `saving` → `sav`).
fn english_stem_len(word: &[char], stem: &mut Vec<char>) -> usize {
    stem.clear();
    stem.extend_from_slice(word);
    if word.len() <= 3 || !word.iter().all(char::is_ascii_lowercase) {
        return word.len();
    }
    let cut = |stem: &mut Vec<char>, n: usize| stem.truncate(stem.len() - n);
    if ends_with(stem, "ies") || ends_with(stem, "ied") {
        cut(stem, 3);
        stem.push('y');
    } else if ends_with(stem, "sses") {
        cut(stem, 2);
    } else if ends_with(stem, "ing") && stem.len() >= 6 {
        cut(stem, 3);
        undouble(stem);
    } else if ends_with(stem, "ed") && stem.len() >= 5 {
        cut(stem, 2);
        undouble(stem);
    } else if (ends_with(stem, "ly") && stem.len() >= 5)
        || ["ches", "shes", "xes", "zes"].iter().any(|s| ends_with(stem, s))
    {
        cut(stem, 2);
    } else if ends_with(stem, "s") && !["ss", "us", "is"].iter().any(|s| ends_with(stem, s)) {
        cut(stem, 1);
    }
    if stem.len() >= 4 && ends_with(stem, "e") && !ends_with(stem, "ee") {
        cut(stem, 1);
    }
    common_prefix(word, stem)
}

fn undouble(stem: &mut Vec<char>) {
    let n = stem.len();
    if n >= 3 && stem[n - 1] == stem[n - 2] && !matches!(stem[n - 1], 'l' | 's' | 'z' | 'e' | 'o') {
        stem.pop();
    }
}

/// Function words that say little about what a text is about.
const STOPWORDS: &str = concat!(
    // English
    "a about after all also am an and any are as at be been but by can could did do does for from had ",
    "has have he her him his how i if in into is it its just me my no not of on or our please she so ",
    "some than that the their them then there these they this those to up us was we were what when ",
    "where which who why will with would you your ",
    // Korean
    "좀 그 이 저 것 거 수 등 및 또 더 잘 그리고 그런데 하지만 그래서 그럼 나 내 제 너 ",
    "네 우리 저희 이거 그거 저거 여기 거기 뭐 무엇 어떻게 왜 언제 어디 있 없 하 ",
    "되 해 한 할 있다 있는 있어 있고 없다 없는 이다 하다 했다 한다 된다 됐다 같다 같은 ",
    "때 중 ",
    // Memories are about the user; naming them says nothing.
    "user 사용자 주인님 ",
);

fn is_stopword(word: &[char]) -> bool {
    word.is_empty() || (word.len() == 1 && word[0].is_ascii_lowercase()) || lexicon().stopwords.contains(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stem(word: &str) -> String {
        let chars: Vec<char> = word.chars().collect();
        let mut out = Vec::new();
        if Script::of(chars[0]) == Script::Hangul {
            chars[..korean_stem_len(&chars)].iter().collect()
        } else {
            english_stem_len(&chars, &mut out);
            out.iter().collect()
        }
    }

    #[test]
    fn korean_particles_and_endings_are_stripped() {
        for (word, expected) in [
            ("서울에서", "서울"),
            ("서울에서는", "서울"),
            ("공고를", "공고"),
            ("공고", "공고"),
            ("찾아줘", "찾"),
            ("정리해줘", "정리"),
            ("정리했다", "정리"),
            ("집에", "집"),
            ("이", "이"),
            ("대출은", "대출"),
        ] {
            assert_eq!(stem(word), expected, "{word}");
        }
    }

    #[test]
    fn english_suffixes_are_stripped() {
        for (word, expected) in [
            ("running", "run"),
            ("runs", "run"),
            ("applied", "apply"),
            ("applies", "apply"),
            ("saved", "sav"),
            ("saving", "sav"),
            ("save", "sav"),
            ("boxes", "box"),
            ("class", "class"),
            ("the", "the"),
            ("quickly", "quick"),
            ("notices", "notic"),
            ("notice", "notic"),
        ] {
            assert_eq!(stem(word), expected, "{word}");
        }
    }

    #[test]
    fn text_is_normalised() {
        let mut out = String::new();
        normalize_text("Hello, World! 서울에서—공고를…", &mut out);
        assert_eq!(out, "hello  world  서울에서 공고를   ");
        // Decomposed Hangul (NFD) and full-width letters fold to the usual form.
        normalize_text("\u{1109}\u{1165}\u{110b}\u{116e}\u{11af} ＳＨ", &mut out);
        assert_eq!(out, "서울 sh");
    }
}
