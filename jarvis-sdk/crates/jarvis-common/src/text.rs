//! Text helpers that count Unicode characters (scalar values), never bytes.
//!
//! Every character limit in Jarvis (the 2,000-character overflow summary, the
//! 10,000-character input limit, event previews) is a count of `char`s, so a
//! Hangul syllable counts as one, the same as in the Python reference.

/// Number of Unicode scalar values in `s`.
pub fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// The first `max` characters of `s`, as a borrowed slice (never splits a character).
pub fn truncate_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((byte, _)) => &s[..byte],
        None => s,
    }
}

/// `s` cut to at most `max` characters; when cut, the last character is `…`.
pub fn truncate_with_marker(s: &str, max: usize) -> String {
    if max == 0 {
        return String::new();
    }
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some(_) => {
            let mut out = truncate_chars(s, max - 1).to_owned();
            out.push('…');
            out
        }
    }
}

/// `text` on one line (every whitespace run one space, trimmed), cut to
/// `max` characters with `…`.
pub fn one_line(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate_with_marker(&line, max)
}

/// An error and its sources as one line: `outer: cause: root cause`
/// (a source already contained in an earlier message is left out).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// 64-bit FNV-1a of `bytes`: a fixed, platform-independent hash for ids and
/// digests (not a cryptographic one).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// |A ∩ B| / |A ∪ B| over the sets of adjacent character pairs.
pub fn bigram_jaccard(a: &str, b: &str) -> f64 {
    let grams = |s: &str| -> std::collections::BTreeSet<(char, char)> {
        let chars: Vec<char> = s.chars().collect();
        chars.windows(2).map(|w| (w[0], w[1])).collect()
    };
    let (x, y) = (grams(a), grams(b));
    let union = x.union(&y).count();
    if union == 0 {
        return if a == b { 1.0 } else { 0.0 };
    }
    x.intersection(&y).count() as f64 / union as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_cuts_hangul_by_characters() {
        let s = "가나다라마";
        assert_eq!(char_len(s), 5);
        assert_eq!(truncate_chars(s, 2), "가나");
        assert_eq!(truncate_chars(s, 9), s);
        assert_eq!(truncate_chars("", 3), "");
    }

    #[test]
    fn fnv1a64_matches_the_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn marker_keeps_the_limit() {
        assert_eq!(truncate_with_marker("abcdef", 4), "abc…");
        assert_eq!(char_len(&truncate_with_marker("가나다라마", 3)), 3);
        assert_eq!(truncate_with_marker("abc", 3), "abc");
        assert_eq!(truncate_with_marker("abc", 0), "");
    }
}
