//! The glob patterns of approval rules: `*` matches any run of characters
//! (also none), `?` one character, `\` makes the next character literal.

/// Whether `text` matches `pattern` as a whole.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Iterative matching with one backtrack point per `*`: linear in practice,
    // never exponential.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some('?') => {
                pi += 1;
                ti += 1;
            }
            Some('\\') if p.get(pi + 1) == Some(&t[ti]) => {
                pi += 2;
                ti += 1;
            }
            Some(c) if *c != '\\' && *c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
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
    }

    #[test]
    fn escaped_text_matches_only_itself() {
        for text in ["rm *", "a?b", r"c:\dir\*", "plain"] {
            let p = glob_escape(text);
            assert!(glob_match(&p, text), "{text}");
            assert!(!glob_match(&p, &format!("{text}x")), "{text}");
        }
        assert!(!glob_match(&glob_escape("rm *"), "rm -rf /"));
    }

    #[test]
    fn pathological_patterns_stay_fast() {
        let text = "a".repeat(10_000);
        assert!(!glob_match(&"*a".repeat(50).replace("a*a", "a*b"), &text));
    }
}
