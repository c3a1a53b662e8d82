//! Words of Korean and English text, as recall reads them: normalisation,
//! scripts, light stemming and function words. The offline
//! `HashEmbedder` (in the model layer) hashes the features of these
//! tokens; memory's lexical index counts their terms.
//!
//! 1. **Normalise** ([`normalize_text`]): Unicode NFKC (composes Hangul
//!    jamo, folds full-width letters), lower case, everything but letters,
//!    digits and combining marks becomes a space.
//! 2. **Tokenise** ([`for_each_token`]) on spaces, and again where Hangul
//!    meets another script (`lh공고` → `lh`, `공고`). A Hangul run that is
//!    only a particle after another script (`sh에서`) is dropped.
//! 3. **Stem** lightly: Korean particles and common verb endings are
//!    stripped (`서울에서는` → `서울`, `정리해줘` → `정리`), English
//!    suffixes too (`running` → `run`, `applied` → `apply`).

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use foldhash::fast::RandomState;
use unicode_normalization::char::is_combining_mark;
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};

/// One token of a text (see [`for_each_token`]).
#[derive(Debug, Clone, Copy)]
pub struct Token<'a> {
    /// Its script.
    pub script: Script,
    /// Its characters, normalised.
    pub chars: &'a [char],
    /// Its stem: a prefix of `chars` for Hangul and dense scripts; for
    /// Latin words it may end differently (`applied` → `apply`).
    pub stem: &'a [char],
    /// How many leading characters `stem` shares with `chars`.
    pub stem_prefix: usize,
    /// A function word (`the`, `좀`) that says little about the text.
    pub stopword: bool,
}

/// Buffers [`for_each_token`] reuses from call to call.
#[derive(Debug, Default)]
pub struct TokenScratch {
    text: String,
    token: Vec<char>,
    stem: Vec<char>,
}

/// Calls `f` with every token of `text`, in order (see the module docs).
pub fn for_each_token(text: &str, scratch: &mut TokenScratch, mut f: impl FnMut(Token<'_>)) {
    normalize_text(text, &mut scratch.text);
    let normalized = std::mem::take(&mut scratch.text);
    for word in normalized.split(' ').filter(|w| !w.is_empty()) {
        let mut previous: Option<Script> = None;
        let mut chars = word.chars().peekable();
        while let Some(first) = chars.next() {
            let script = Script::of(first);
            scratch.token.clear();
            scratch.token.push(first);
            while let Some(&next) = chars.peek() {
                if Script::of(next) != script && !is_combining_mark(next) {
                    break;
                }
                scratch.token.push(next);
                chars.next();
            }
            let after_other_script = previous.is_some();
            previous = Some(script);
            let token = &scratch.token;
            if script == Script::Hangul && after_other_script && is_particle(token) {
                continue; // `sh에서`: the particle of a Latin word
            }
            let stem_prefix = match script {
                Script::Hangul => korean_stem_len(token),
                Script::Alnum => english_stem_len(token, &mut scratch.stem),
                Script::Dense => token.len(),
            };
            if script != Script::Alnum {
                scratch.stem.clear();
                scratch.stem.extend_from_slice(&token[..stem_prefix]);
            }
            let stem = &scratch.stem;
            f(Token {
                script,
                chars: token,
                stem,
                stem_prefix,
                stopword: is_stopword(token) || is_stopword(stem),
            });
        }
    }
    scratch.text = normalized;
}

/// Writing systems that tokenise differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// Hangul syllables and jamo.
    Hangul,
    /// Scripts written without spaces: Han, kana, Thai.
    Dense,
    /// Letters of other scripts (Latin, Greek, Cyrillic, …) and digits.
    Alnum,
}

impl Script {
    /// The script of `c`.
    pub fn of(c: char) -> Script {
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
pub fn normalize_text(text: &str, out: &mut String) {
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
    let keep = |c: char| {
        // Precomposed Hangul and ASCII first: most characters of a Korean
        // or English memory, and the general tests below are table
        // lookups (a record's words are taken at every start).
        if ('\u{AC00}'..='\u{D7A3}').contains(&c) {
            out.push(c);
        } else if c.is_ascii() {
            out.push(if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                ' '
            });
        } else if c.is_alphanumeric() || is_combining_mark(c) {
            out.extend(c.to_lowercase());
        } else {
            out.push(' ');
        }
    };
    // Text already in NFKC (most text: precomposed Hangul, plain Latin
    // with accents) skips the decomposition and recomposition, which were
    // most of a recall's embedding time; the quick check answers `Yes`
    // only when normalising would change nothing.
    if is_nfkc_quick(text.chars()) == IsNormalized::Yes {
        text.chars().for_each(keep);
    } else {
        text.nfkc().for_each(keep);
    }
}

/// How many leading characters `a` and `b` share.
pub fn common_prefix(a: &[char], b: &[char]) -> usize {
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

/// The word lists as sets, built once (looked up for every word of every
/// text embedded or indexed, a store's records at each start: a fast
/// hash, seeded per map).
struct Lexicon {
    /// Particles and endings by their last syllable, longest first, with
    /// whether each is a particle.
    suffixes: HashMap<char, Vec<(Vec<char>, bool)>, RandomState>,
    particles: HashSet<Vec<char>, RandomState>,
    stopwords: HashSet<Vec<char>, RandomState>,
}

fn lexicon() -> &'static Lexicon {
    static LEXICON: OnceLock<Lexicon> = OnceLock::new();
    LEXICON.get_or_init(|| {
        let mut suffixes: HashMap<char, Vec<(Vec<char>, bool)>, RandomState> = HashMap::default();
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

/// Whether `word` (normalised) is a Korean particle on its own.
pub fn is_particle(word: &[char]) -> bool {
    lexicon().particles.contains(word)
}

/// The length of the stem of a Hangul word: the longest particle or ending
/// stripped, then one more particle (`서울에서는` → `서울`), at least one
/// syllable left, two before a one-syllable ending (`공고` stays).
pub fn korean_stem_len(word: &[char]) -> usize {
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
pub fn english_stem_len(word: &[char], stem: &mut Vec<char>) -> usize {
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

/// Whether `word` (normalised) is a function word recall ignores, or a
/// single Latin letter.
pub fn is_stopword(word: &[char]) -> bool {
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

    /// Text that takes the quick path (already in NFKC) comes out as if it
    /// had been normalised, and text that is not takes the long one.
    #[test]
    fn the_quick_path_gives_what_normalising_gives() {
        let normalised = |text: &str| -> String {
            text.nfkc()
                .flat_map(|c| {
                    let keep = c.is_alphanumeric() || is_combining_mark(c);
                    let lower: Vec<char> = if keep {
                        c.to_lowercase().collect()
                    } else {
                        vec![' ']
                    };
                    lower
                })
                .collect()
        };
        let mut out = String::new();
        for (text, quick) in [
            ("서울 행복주택 청약 공고, 마감일은 금요일이에요.", true),
            ("Café naïve résumé — 東京 İstanbul ΣΊΣΥΦΟΣ", true),
            ("e\u{301}", false),
            ("㈜ ＡＢＣ ﬁ ½", false),
            ("\u{1109}\u{1165}\u{110b}\u{116e}\u{11af}", false),
        ] {
            assert_eq!(is_nfkc_quick(text.chars()) == IsNormalized::Yes, quick, "{text}");
            normalize_text(text, &mut out);
            assert_eq!(out, normalised(text), "{text}");
        }
    }
}
