//! The layer rule of DESIGN.md §3: a module of jarvis-sdk imports only from
//! layers below it (and `common`, which imports no layer). This scans the
//! sources for upward paths in every form, and proves the scanner on samples.

use std::path::{Path, PathBuf};

/// Layers, bottom to top.
const LAYERS: [&str; 5] = ["model", "memory", "agent", "core", "app"];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == module)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

/// Rust tokens with comments, string and char literals and lifetimes removed.
fn tokenize(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_string(&c, i + 1);
        } else if (ch == 'r' || (ch == 'b' && at(i + 1) == 'r')) && is_raw_string_start(&c, i) {
            i = skip_raw_string(&c, i);
        } else if ch == 'b' && at(i + 1) == '"' {
            i = skip_string(&c, i + 2);
        } else if ch == 'b' && at(i + 1) == '\'' {
            i = skip_char(&c, i + 1);
        } else if ch == '\'' {
            if at(i + 1) == '\\' || at(i + 2) == '\'' {
                i = skip_char(&c, i);
            } else {
                // A lifetime or label.
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            if ch == 'r' && at(i + 1) == '#' {
                i += 2;
            }
            let word_start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let _ = start;
            out.push(Tok::Ident(c[word_start..i].iter().collect()));
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Tok::PathSep);
            i += 2;
        } else if ch.is_whitespace() {
            i += 1;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

fn skip_string(c: &[char], mut i: usize) -> usize {
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

fn skip_char(c: &[char], mut i: usize) -> usize {
    i += 1; // the opening quote
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            '\'' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

fn is_raw_string_start(c: &[char], i: usize) -> bool {
    let mut j = if c[i] == 'b' { i + 2 } else { i + 1 };
    while j < c.len() && c[j] == '#' {
        j += 1;
    }
    c.get(j) == Some(&'"')
}

fn skip_raw_string(c: &[char], i: usize) -> usize {
    let mut j = if c[i] == 'b' { i + 2 } else { i + 1 };
    let mut hashes = 0;
    while c[j] == '#' {
        hashes += 1;
        j += 1;
    }
    j += 1; // the opening quote
    while j < c.len() {
        if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
            return j + 1 + hashes;
        }
        j += 1;
    }
    j
}

/// Every path in a `use` tree starting at `i`, expanded (`a::{b, c::d}` → `a::b`, `a::c::d`).
fn use_tree(t: &[Tok], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    while *i < t.len() {
        match &t[*i] {
            Tok::PathSep => *i += 1,
            Tok::Ident(s) if s == "as" => {
                *i += 2;
                out.push(path);
                return;
            }
            Tok::Ident(s) => {
                path.push(s.clone());
                *i += 1;
                if t.get(*i) != Some(&Tok::PathSep) {
                    if matches!(t.get(*i), Some(Tok::Ident(a)) if a == "as") {
                        *i += 2;
                    }
                    out.push(path);
                    return;
                }
            }
            Tok::Punct('{') => {
                *i += 1;
                loop {
                    match t.get(*i) {
                        Some(Tok::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *i += 1,
                        None => return,
                        Some(_) => use_tree(t, i, path.clone(), out),
                    }
                }
            }
            Tok::Punct('*') => {
                *i += 1;
                out.push(path);
                return;
            }
            _ => {
                out.push(path);
                return;
            }
        }
    }
}

/// The absolute module path `path` names, seen from module `here`; `None`
/// when it does not start at `crate`, `super` or `self`.
fn resolve(here: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut abs: Vec<String>;
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            abs = Vec::new();
            rest = &path[1..];
        }
        Some("self") => {
            abs = here.to_vec();
            rest = &path[1..];
        }
        Some("super") => {
            abs = here.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                abs.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    abs.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(abs)
}

/// Upward references in one file's source; `module` is the file's module path.
fn violations(module: &[String], src: &str) -> Vec<String> {
    let Some(own) = module.first().map(String::as_str) else {
        return Vec::new();
    };
    if own != "common" && rank(own).is_none() {
        return Vec::new(); // the crate root and `testing` are not layers
    }
    let toks = tokenize(src);
    let mut found = Vec::new();
    let mut scope: Vec<(String, i32)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        let here: Vec<String> = module
            .iter()
            .cloned()
            .chain(scope.iter().map(|(m, _)| m.clone()))
            .collect();
        let mut paths = Vec::new();
        match &toks[i] {
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                depth -= 1;
                if scope.last().is_some_and(|(_, d)| *d == depth) {
                    scope.pop();
                }
                i += 1;
            }
            Tok::Ident(k) if k == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Punct('{'))) = (toks.get(i + 1), toks.get(i + 2)) {
                    scope.push((name.clone(), depth));
                }
                i += 1;
            }
            Tok::Ident(k) if k == "use" => {
                i += 1;
                use_tree(&toks, &mut i, Vec::new(), &mut paths);
            }
            Tok::Ident(k)
                if matches!(k.as_str(), "crate" | "super" | "self")
                    && toks.get(i + 1) == Some(&Tok::PathSep)
                    && (i == 0 || toks[i - 1] != Tok::PathSep) =>
            {
                let mut path = vec![k.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Tok::PathSep) {
                    match toks.get(j + 1) {
                        Some(Tok::Ident(s)) => path.push(s.clone()),
                        _ => break,
                    }
                    j += 2;
                }
                paths.push(path);
                i = j;
            }
            _ => i += 1,
        }
        for path in paths {
            let Some(abs) = resolve(&here, &path) else {
                continue;
            };
            let Some(target) = abs.first().map(String::as_str) else {
                continue;
            };
            let upward = match (own, rank(target)) {
                ("common", Some(_)) => true,
                (_, Some(t)) => rank(own).is_some_and(|o| t > o),
                _ => false,
            };
            if upward {
                found.push(format!("{} -> {}", here.join("::"), abs.join("::")));
            }
        }
    }
    found
}

/// The module path of a file under `src/`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn at(path: &str, src: &str) -> Vec<String> {
    violations(&module_of(Path::new(path)), src)
}

#[test]
fn the_scanner_catches_every_form_of_upward_import() {
    assert_eq!(at("agent/x.rs", "use crate::core::X;"), ["agent::x -> core::X"]);
    assert_eq!(at("agent/x.rs", "use crate::{core::X};"), ["agent::x -> core::X"]);
    assert_eq!(
        at("agent/x.rs", "use crate::{model::A, app::{b::C, D}};").len(),
        2
    );
    assert_eq!(
        at("memory/mod.rs", "fn f() { crate::app::f(); }"),
        ["memory -> app::f"]
    );
    assert_eq!(
        at("model/x.rs", "fn f() { super::super::app::f() }"),
        ["model::x -> app::f"]
    );
    assert_eq!(
        at("model/x.rs", "use super::{super::agent::Y};"),
        ["model::x -> agent::Y"]
    );
    assert_eq!(
        at("model/x.rs", "pub use crate::agent::Y;"),
        ["model::x -> agent::Y"]
    );
    assert_eq!(
        at("model/x.rs", "pub(crate) use crate::agent as a;"),
        ["model::x -> agent"]
    );
    assert_eq!(
        at("common/x.rs", "use crate::model::Message;"),
        ["common::x -> model::Message"]
    );
    assert_eq!(
        at(
            "agent/a/b.rs",
            "mod t { use super::super::super::super::app::Z; }"
        ),
        ["agent::a::b::t -> app::Z"]
    );
}

#[test]
fn the_scanner_allows_downward_paths_and_ignores_text() {
    assert!(
        at(
            "agent/x.rs",
            "use crate::model::X; use crate::common::Y; use super::tool::T;"
        )
        .is_empty()
    );
    assert!(
        at(
            "agent/x.rs",
            "#[cfg(test)] mod tests { use super::*; use super::super::event::E; }"
        )
        .is_empty()
    );
    assert!(
        at(
            "model/x.rs",
            "// use crate::app::X;\n/* crate::core::f() /* nested */ */"
        )
        .is_empty()
    );
    assert!(
        at(
            "model/x.rs",
            r##"const S: &str = "crate::app::f()"; const R: &str = r#"use crate::core::X;"#;"##
        )
        .is_empty()
    );
    assert!(
        at(
            "model/x.rs",
            "fn f<'a>(x: &'a str) -> char { let _ = 'c'; '\\'' }"
        )
        .is_empty()
    );
    assert!(
        at("lib.rs", "pub use crate::app::X;").is_empty(),
        "the crate root re-exports every layer"
    );
    // A path through a lower layer that merely has a module named like a layer is not upward.
    assert!(at("agent/x.rs", "use crate::model::core::X;").is_empty());
}

#[test]
fn the_sdk_sources_have_no_upward_import() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for layer in LAYERS.iter().chain(&["common"]) {
        assert!(src.join(layer).is_dir(), "layer module {layer} is missing");
    }
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 10);
    let mut all = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        all.extend(
            violations(&module_of(rel), &text)
                .into_iter()
                .map(|v| format!("{}: {v}", rel.display())),
        );
    }
    assert!(all.is_empty(), "upward imports:\n{}", all.join("\n"));
}
