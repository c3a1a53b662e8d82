//! [`estimate_tokens`]: about how many tokens a text is, for model calls
//! whose provider reported no usage.
//!
//! The heuristic needs no tokenizer and knows no model, so it is only an
//! estimate (a [`Usage`](super::Usage) built from it is marked
//! `estimated`). Byte-pair tokenizers give English and code about four
//! characters a token, and Hangul, kana and CJK ideographs about one
//! character a token (often more); other letters (accented Latin, Greek,
//! Cyrillic, emoji) fall between. So each character weighs a share of a
//! token and the sum is rounded up:
//!
//! | characters | weight |
//! |---|---|
//! | ASCII | ¼ token |
//! | Hangul, kana, CJK ideographs and their punctuation, full-width forms | 1 token |
//! | anything else | ½ token |

/// About how many tokens `text` is (see the module docs): ASCII
/// characters count a quarter token, Hangul, kana and CJK characters one
/// token, any other character half a token; the sum is rounded up, so only
/// the empty text is 0.
pub fn estimate_tokens(text: &str) -> u64 {
    let quarters: u64 = text.chars().map(quarters_of).sum();
    quarters.div_ceil(4)
}

/// The weight of `c` in quarter tokens.
fn quarters_of(c: char) -> u64 {
    if c.is_ascii() {
        1
    } else if is_wide_script(c) {
        4
    } else {
        2
    }
}

/// Whether `c` belongs to the scripts tokenizers split about one character
/// a token: Hangul, kana, CJK ideographs, CJK punctuation and full-width
/// forms.
fn is_wide_script(c: char) -> bool {
    matches!(
        u32::from(c),
        0x1100..=0x11FF // Hangul Jamo
            | 0x3000..=0x303F // CJK symbols and punctuation
            | 0x3040..=0x30FF // Hiragana, Katakana
            | 0x3130..=0x318F // Hangul compatibility Jamo
            | 0x31F0..=0x31FF // Katakana phonetic extensions
            | 0x3400..=0x4DBF // CJK extension A
            | 0x4E00..=0x9FFF // CJK unified ideographs
            | 0xA960..=0xA97F // Hangul Jamo extended A
            | 0xAC00..=0xD7AF // Hangul syllables
            | 0xD7B0..=0xD7FF // Hangul Jamo extended B
            | 0xF900..=0xFAFF // CJK compatibility ideographs
            | 0xFF00..=0xFFEF // half-width and full-width forms
            | 0x20000..=0x3134F // CJK extensions B to G
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_counts_four_characters_a_token_rounded_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 1);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(
            estimate_tokens("The quick brown fox jumps over the lazy dog."),
            11
        );
    }

    #[test]
    fn hangul_and_cjk_count_a_token_a_character() {
        assert_eq!(estimate_tokens("안녕하세요"), 5);
        assert_eq!(estimate_tokens("東京"), 2);
        assert_eq!(estimate_tokens("ひらがな"), 4);
        assert_eq!(estimate_tokens("ㅋㅋ"), 2, "compatibility Jamo");
        assert_eq!(estimate_tokens("。"), 1, "CJK punctuation");
    }

    #[test]
    fn mixed_text_adds_its_shares() {
        // "hello " is 6 quarters, "세계" 8: 14 quarters, 3.5 tokens.
        assert_eq!(estimate_tokens("hello 세계"), 4);
        // Accented Latin and emoji weigh half a token each.
        assert_eq!(estimate_tokens("café"), 2);
        assert_eq!(estimate_tokens("😀😀"), 1);
    }
}
