//! [`Validation`]: the first stage (R-SEC-3). In this order it rejects an
//! empty input, enforces the length limit (Unicode characters, after
//! normalisation), blocks script patterns, and NFC-normalises the text.
//!
//! # Script patterns
//!
//! Blocked, case-insensitively: `<script` and `</script`; `<iframe`,
//! `<object`, `<embed`, `<frame`, `<applet`; the URL schemes
//! `javascript:`, `vbscript:` and `livescript:`; `data:text/html`,
//! `data:application/xhtml` and `data:image/svg+xml` URLs; and inline event
//! handlers (`on…=`) inside something that looks like a tag, such as
//! `<svg onload=…>` or `<img src=x onerror=…>`.
//!
//! They are found in disguise too: the text is first brought to a skeleton
//! by decoding HTML character references (`&#x3c;`, `&#60;`, `&lt;`,
//! `&colon;`, `&Tab;`, twice, for double encoding), applying NFKC (fullwidth
//! `＜ｓｃｒｉｐｔ＞` becomes `<script>`), lower-casing, and removing what
//! browsers and renderers ignore inside a keyword: control characters (NUL,
//! tab, newlines), zero-width characters, soft hyphens and bidi controls.
//! So `<ScRiPt`, `<scr\0ipt`, `<scr\u{200b}ipt`, `&#x3c;script`,
//! `java\tscript:` and `＜script＞` are all refused.
//!
//! Ordinary text passes: `a < b`, `x<y && y>z`, "I like javascript",
//! "the onload event". Text that *names* a tag with its brackets, such as
//! "describe the `<script>` tag", is refused: the check is deliberately
//! conservative, and "the script tag" says the same without markup.
//!
//! # HTML escaping
//!
//! The text is *not* HTML-escaped here (SPEC.md §17.3 #8): the model and the
//! history get the normalised text as written, so "a < b" reaches the model
//! unchanged. Escaping happens where text meets HTML: screens render text as
//! text, and [`html_escape`] is there for any code that must build HTML.

use async_trait::async_trait;
use regex::Regex;
use std::sync::OnceLock;
use unicode_normalization::UnicodeNormalization;

use super::{SecurityError, SecurityInput, SecurityStage};

/// Settings of [`Validation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationConfig {
    /// The longest input, in Unicode characters after NFC. Default 10,000.
    pub max_chars: usize,
}

impl Default for ValidationConfig {
    fn default() -> Self {
        Self { max_chars: 10_000 }
    }
}

/// The standard validation stage; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Validation {
    config: ValidationConfig,
}

impl Validation {
    /// A stage with `config`.
    pub fn new(config: ValidationConfig) -> Self {
        Self { config }
    }

    /// Checks `text` and returns it NFC-normalised.
    pub fn validate(&self, text: &str) -> Result<String, SecurityError> {
        let limit = self.config.max_chars;
        if text.trim().is_empty() {
            return Err(SecurityError::Empty);
        }
        // NFC can merge characters (a decomposed Hangul syllable is two or
        // three jamo), so far longer input is refused before normalising it.
        let raw = if text.len() <= limit {
            text.len()
        } else {
            text.chars().count()
        };
        if raw > limit.saturating_mul(4) {
            return Err(SecurityError::TooLong { chars: raw, limit });
        }
        let normalised: String = text.nfc().collect();
        let chars = normalised.chars().count();
        if chars > limit {
            return Err(SecurityError::TooLong { chars, limit });
        }
        if let Some(pattern) = script_pattern(&normalised) {
            return Err(SecurityError::ScriptPattern { pattern });
        }
        Ok(normalised)
    }
}

#[async_trait]
impl SecurityStage for Validation {
    fn name(&self) -> &str {
        "validation"
    }

    async fn check(&self, input: &mut SecurityInput) -> Result<(), SecurityError> {
        input.text = self.validate(&input.text)?;
        Ok(())
    }
}

/// Escapes `&`, `<`, `>`, `"` and `'` for use inside HTML.
pub fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Keywords found in the skeleton with invisible characters removed.
const KEYWORDS: [(&str, &str); 14] = [
    ("<script", "a script tag"),
    ("</script", "a script tag"),
    ("<iframe", "an embedded frame"),
    ("<frame", "an embedded frame"),
    ("<object", "an embedded object"),
    ("<embed", "an embedded object"),
    ("<applet", "an embedded object"),
    ("javascript:", "a javascript: URL"),
    ("vbscript:", "a vbscript: URL"),
    ("livescript:", "a script URL"),
    ("data:text/html", "an HTML data: URL"),
    ("data:application/xhtml", "an HTML data: URL"),
    ("data:image/svg+xml", "an SVG data: URL"),
    ("data:text/javascript", "a script data: URL"),
];

/// The first script pattern in `text`, if any.
fn script_pattern(text: &str) -> Option<&'static str> {
    // Nothing can form a pattern without one of these characters (or their
    // fullwidth and small forms, or a character reference).
    let suspicious = |c: char| matches!(c, '<' | ':' | '&' | '＜' | '﹤' | '：' | '﹕' | '＆' | '﹠');
    if !text.chars().any(suspicious) {
        return None;
    }
    let decoded = decode_references(&decode_references(text));
    let folded: String = decoded.nfkc().flat_map(char::to_lowercase).collect();
    let compact: String = folded.chars().filter(|c| !is_ignorable(*c)).collect();
    if let Some((_, name)) = KEYWORDS.iter().find(|(k, _)| compact.contains(k)) {
        return Some(name);
    }
    // Attributes are separated by whitespace, `/` or quotes: keep those
    // boundaries (invisible characters become spaces) for the handler check.
    let spaced: String = folded
        .chars()
        .map(|c| if is_ignorable(c) { ' ' } else { c })
        .collect();
    handler_regex()
        .is_match(&spaced)
        .then_some("an inline event handler")
}

fn handler_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r#"<[a-z][a-z0-9-]*(?:[\s/"'][^<>]*?)?[\s/"']on[a-z]+\s*="#)
            .expect("the handler pattern is valid")
    })
}

/// Characters that renderers ignore or strip inside a keyword.
fn is_ignorable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}' | '\u{034F}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}'
        )
}

/// Decodes numeric character references and the named ones that matter
/// here; anything else is left as it is.
fn decode_references(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        match decode_one(rest) {
            Some((c, used)) => {
                out.push(c);
                rest = &rest[used..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// One reference at the start of `s` (which starts with `&`): the character
/// and the bytes used. The closing `;` is optional, as browsers allow.
fn decode_one(s: &str) -> Option<(char, usize)> {
    let body = &s[1..];
    if let Some(num) = body.strip_prefix('#') {
        let (radix, digits_start) = match num.as_bytes().first() {
            Some(b'x' | b'X') => (16, 1),
            _ => (10, 0),
        };
        let digits: &str = &num[digits_start..];
        let len = digits
            .bytes()
            .take_while(|b| (*b as char).is_digit(radix))
            .count();
        if len == 0 || len > 10 {
            return None;
        }
        let value = u32::from_str_radix(&digits[..len], radix).ok()?;
        let c = char::from_u32(value).unwrap_or('\u{FFFD}');
        let mut used = 2 + digits_start + len;
        if s[used..].starts_with(';') {
            used += 1;
        }
        return Some((c, used));
    }
    const NAMED: [(&str, char); 11] = [
        ("lt", '<'),
        ("gt", '>'),
        ("colon", ':'),
        ("tab", '\t'),
        ("newline", '\n'),
        ("sol", '/'),
        ("quot", '"'),
        ("apos", '\''),
        ("amp", '&'),
        ("lpar", '('),
        ("rpar", ')'),
    ];
    let len = body.bytes().take_while(u8::is_ascii_alphabetic).count();
    let name = body[..len].to_ascii_lowercase();
    let (_, c) = NAMED.iter().find(|(n, _)| *n == name)?;
    let mut used = 1 + len;
    if s[used..].starts_with(';') {
        used += 1;
    }
    Some((*c, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<String, SecurityError> {
        Validation::default().validate(text)
    }

    #[test]
    fn references_decode_with_and_without_semicolons() {
        assert_eq!(
            decode_references("&#x3c;a&#60;b&lt;c&LT&colon;&Tab;"),
            "<a<b<c<:\t"
        );
        assert_eq!(
            decode_references("AT&T & co &#xZZ; &#99999999999;"),
            "AT&T & co &#xZZ; &#99999999999;"
        );
        assert_eq!(decode_references("&#x110000;"), "\u{FFFD}");
    }

    #[test]
    fn html_escape_covers_the_five() {
        assert_eq!(
            html_escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn nfc_and_the_limit_count_characters() {
        // 6,000 syllables written as 12,000 jamo: under the limit once composed.
        let decomposed = "\u{1100}\u{1161}".repeat(6_000);
        let composed = check(&decomposed).unwrap();
        assert_eq!(composed.chars().count(), 6_000);
        assert_eq!(composed, "가".repeat(6_000));
        // 10,001 three-byte characters: over, counted in characters.
        assert_eq!(
            check(&"가".repeat(10_001)).unwrap_err(),
            SecurityError::TooLong {
                chars: 10_001,
                limit: 10_000
            }
        );
        assert!(check(&"가".repeat(10_000)).is_ok());
    }
}
