//! The glob patterns of approval rules: `*` matches any run of characters
//! (also none, also `/` and line breaks), `?` one byte, `\` makes the next
//! character literal; every other character, `[`, `]`, `{` and `}`
//! included, stands for itself.
//!
//! Matching is done by `globset` (compiled once per rule file): a pattern
//! is translated so that only `*`, `?` and `\` keep a meaning there
//! (brackets and braces are escaped, runs of `*` become one). Two things
//! differ from a character-by-character reading: `?` matches one byte, so
//! it matches one character of ASCII text but not a whole Hangul syllable
//! (use `*` there), and a pattern ending in a lone `\` is invalid (its rule
//! is skipped with a warning) instead of never matching.

use globset::{GlobBuilder, GlobMatcher};

/// A compiled rule pattern.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    matcher: GlobMatcher,
    /// The text the pattern stands for when it has no `*` or `?`.
    literal: Option<String>,
}

impl Pattern {
    /// Compiles `pattern`; the error says what is wrong with it.
    pub(crate) fn new(pattern: &str) -> Result<Self, String> {
        let mut translated = String::with_capacity(pattern.len() + 8);
        let mut literal = Some(String::with_capacity(pattern.len()));
        let mut chars = pattern.chars();
        let mut last_star = false;
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    let next = chars
                        .next()
                        .ok_or_else(|| format!("the pattern {pattern:?} ends in a lone `\\`"))?;
                    translated.push('\\');
                    translated.push(next);
                    if let Some(text) = &mut literal {
                        text.push(next);
                    }
                    last_star = false;
                }
                '*' => {
                    if !last_star {
                        translated.push('*');
                    }
                    literal = None;
                    last_star = true;
                }
                '?' => {
                    translated.push('?');
                    literal = None;
                    last_star = false;
                }
                '[' | ']' | '{' | '}' => {
                    translated.push('\\');
                    translated.push(c);
                    if let Some(text) = &mut literal {
                        text.push(c);
                    }
                    last_star = false;
                }
                other => {
                    translated.push(other);
                    if let Some(text) = &mut literal {
                        text.push(other);
                    }
                    last_star = false;
                }
            }
        }
        let glob = GlobBuilder::new(&translated)
            .literal_separator(false)
            .backslash_escape(true)
            .case_insensitive(false)
            .build()
            .map_err(|e| format!("the pattern {pattern:?} is invalid: {e}"))?;
        Ok(Self {
            matcher: glob.compile_matcher(),
            literal,
        })
    }

    /// Whether `text` matches as a whole.
    pub(crate) fn is_match(&self, text: &str) -> bool {
        self.matcher.is_match(text)
    }

    /// The text the pattern stands for, when it has no wildcard.
    pub(crate) fn literal(&self) -> Option<&str> {
        self.literal.as_deref()
    }
}

/// Whether `text` matches `pattern` as a whole; an invalid pattern matches
/// nothing.
#[cfg(test)]
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    Pattern::new(pattern).is_ok_and(|p| p.is_match(text))
}

/// `text` as a pattern that matches exactly `text`.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_questions_and_escapes() {
        assert!(glob_match("git", "git"));
        assert!(!glob_match("git", "gitk"));
        assert!(glob_match("notes/*", "notes/a/b.md"));
        assert!(glob_match("*.md", ".md"));
        assert!(glob_match("a?c", "abc") && !glob_match("a?c", "ac"));
        assert!(glob_match("*a*b*c*", "xxaxxbxxcxx"));
        assert!(!glob_match("*a*b*c*", "xxaxxcxxbxx"));
        assert!(glob_match("한*", "한글"));
        assert!(glob_match(r"a\*b", "a*b") && !glob_match(r"a\*b", "axb"));
        assert!(glob_match("", "") && !glob_match("", "x") && glob_match("*", ""));
        assert!(glob_match("**", "a/b") && glob_match("a**b", "a/x/b"));
        assert!(
            glob_match("*", "line one\nline two"),
            "a star crosses line breaks"
        );
    }

    #[test]
    fn brackets_and_braces_stand_for_themselves() {
        assert!(glob_match("[ab]", "[ab]") && !glob_match("[ab]", "a"));
        assert!(glob_match("{a,b}", "{a,b}") && !glob_match("{a,b}", "a"));
        assert!(glob_match(r#"["status"]"#, r#"["status"]"#));
    }

    #[test]
    fn a_lone_trailing_backslash_is_invalid() {
        let e = Pattern::new("rm \\").unwrap_err();
        assert!(e.contains("lone"), "{e}");
        assert!(!glob_match("rm \\", "rm \\"));
    }

    #[test]
    fn literals_are_known() {
        assert_eq!(Pattern::new(r"/bin/r\*m").unwrap().literal(), Some("/bin/r*m"));
        assert_eq!(Pattern::new("/bin/*").unwrap().literal(), None);
    }

    #[test]
    fn escaped_text_matches_only_itself() {
        for text in ["rm *", "a?b", r"c:\dir\*", "plain", "[x]{y}"] {
            let p = glob_escape(text);
            assert!(glob_match(&p, text), "{text}");
            assert!(!glob_match(&p, &format!("{text}x")), "{text}");
        }
        assert!(!glob_match(&glob_escape("rm *"), "rm -rf /"));
    }

    #[test]
    fn pathological_patterns_stay_fast() {
        let text = "a".repeat(10_000);
        let start = std::time::Instant::now();
        assert!(!glob_match(&"*a".repeat(50).replace("a*a", "a*b"), &text));
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }
}
