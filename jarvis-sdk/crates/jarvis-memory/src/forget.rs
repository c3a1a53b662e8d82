//! Forgetting (잊기): what [`MemoryService::forget`](super::MemoryService::forget)
//! keeps of a secret, and how later writes are checked against it.
//!
//! A forgotten text is never stored. What is kept, in `user_model.json`'s
//! `forgotten` list, is a [`ForgottenSecret`]: the 64-bit FNV-1a digest of
//! its normalised form (16 hex digits) and its length in characters. A
//! candidate fact contains the secret when some window of that many
//! characters of the normalised candidate has the same digest, so the
//! secret is refused also inside a longer text ("서연이 비밀번호는 1234야"
//! contains a forgotten "비밀번호는 1234"). Normalised means NFC, lower case,
//! and every run of whitespace one space, trimmed ([`normalise_fact`]).
//!
//! A 64-bit digest can collide: the chance that an unrelated window matches
//! is about one in 2⁶⁴ per window, so a fact is wrongly refused practically
//! never; the secret itself cannot be read back from the digest without
//! guessing it.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use unicode_normalization::UnicodeNormalization;

use jarvis_common::{Timestamp, fnv1a64};

/// The fewest characters a forgotten text may have (after normalising):
/// forgetting a single character would refuse nearly every fact.
pub const MIN_FORGET_CHARS: usize = 2;

/// `text` as forgetting compares it: NFC, lower case, whitespace runs as
/// one space, trimmed.
pub fn normalise_fact(text: &str) -> String {
    let lowered: String = text.nfc().flat_map(char::to_lowercase).collect();
    lowered.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The digest of an already normalised text: FNV-1a (64 bit) over its UTF-8
/// bytes, as 16 lower-case hex digits.
pub fn fact_digest(normalised: &str) -> String {
    format!("{:016x}", fnv1a64(normalised.as_bytes()))
}

/// What is kept of a forgotten text: its digest and length, never the text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgottenSecret {
    /// [`fact_digest`] of the normalised text.
    pub digest: String,
    /// Its length in characters (after normalising).
    pub chars: usize,
    /// When it was forgotten.
    pub at: Timestamp,
}

impl ForgottenSecret {
    /// The record of forgetting `text` at `at`; `None` when the normalised
    /// text is shorter than [`MIN_FORGET_CHARS`].
    pub fn new(text: &str, at: Timestamp) -> Option<Self> {
        let normalised = normalise_fact(text);
        let chars = normalised.chars().count();
        (chars >= MIN_FORGET_CHARS).then(|| Self {
            digest: fact_digest(&normalised),
            chars,
            at,
        })
    }

    /// Whether this records the same text as `other`.
    pub fn same_as(&self, other: &ForgottenSecret) -> bool {
        self.chars == other.chars && self.digest.eq_ignore_ascii_case(&other.digest)
    }
}

/// Whether `text` contains any of the `forgotten` secrets: every window of
/// each recorded length over the normalised `text` is hashed and compared.
/// Entries whose digest is not 16 hex digits are ignored.
pub fn contains_forgotten(text: &str, forgotten: &[ForgottenSecret]) -> bool {
    if forgotten.is_empty() {
        return false;
    }
    let mut by_len: HashMap<usize, Vec<u64>> = HashMap::new();
    for secret in forgotten {
        if secret.chars == 0 || secret.digest.len() != 16 {
            continue;
        }
        if let Ok(digest) = u64::from_str_radix(&secret.digest, 16) {
            by_len.entry(secret.chars).or_default().push(digest);
        }
    }
    let normalised = normalise_fact(text);
    // Byte offsets of every character boundary, so a window of n characters
    // starting at character i is `bounds[i]..bounds[i + n]`.
    let bounds: Vec<usize> = normalised
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(normalised.len()))
        .collect();
    let count = bounds.len() - 1;
    by_len.iter().any(|(&n, digests)| {
        n <= count
            && (0..=count - n).any(|start| {
                let window = &normalised[bounds[start]..bounds[start + n]];
                digests.contains(&fnv1a64(window.as_bytes()))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> ForgottenSecret {
        ForgottenSecret::new(text, Timestamp::EPOCH).unwrap()
    }

    #[test]
    fn normalising_folds_case_whitespace_and_composition() {
        assert_eq!(normalise_fact("  My   PIN\tis\n1234 "), "my pin is 1234");
        // A decomposed Hangul syllable (ᄒ + ᅡ + ᆫ) composes to 한.
        assert_eq!(normalise_fact("\u{1112}\u{1161}\u{11ab}국"), "한국");
        assert_eq!(fact_digest("a"), "af63dc4c8601ec8c");
    }

    #[test]
    fn a_secret_is_found_in_any_window_and_only_there() {
        let pin = secret("PIN is 1234");
        assert_eq!(pin.chars, 11);
        assert!(contains_forgotten("pin is 1234", std::slice::from_ref(&pin)));
        assert!(contains_forgotten(
            "Note: my   Pin IS 1234, don't tell",
            std::slice::from_ref(&pin)
        ));
        assert!(!contains_forgotten("pin is 1235", std::slice::from_ref(&pin)));
        assert!(!contains_forgotten("pin", std::slice::from_ref(&pin)));
        assert!(!contains_forgotten("", std::slice::from_ref(&pin)));
        assert!(!contains_forgotten("anything", &[]));
    }

    #[test]
    fn korean_secrets_are_matched_by_characters_not_bytes() {
        let secret = secret("비밀번호는 1234");
        assert_eq!(secret.chars, 10, "Hangul syllables count one each");
        let list = [secret];
        assert!(contains_forgotten("서연이 비밀번호는   1234야", &list));
        assert!(contains_forgotten("비밀번호는 1234", &list));
        assert!(!contains_forgotten("비밀번호는 5678", &list));
        assert!(!contains_forgotten("서연이는 3학년", &list));
        // Two secrets of different lengths in one list.
        let list = [list[0].clone(), self::secret("서연")];
        assert!(contains_forgotten("딸 이름은 서연", &list));
    }

    #[test]
    fn short_and_damaged_entries() {
        assert!(ForgottenSecret::new(" a ", Timestamp::EPOCH).is_none());
        assert!(ForgottenSecret::new("가", Timestamp::EPOCH).is_none());
        let mut bad = secret("서연");
        bad.digest = "not hex".into();
        assert!(!contains_forgotten("서연", &[bad]));
        assert!(secret("Ab").same_as(&secret("aB")));
    }
}
