//! The layer rule of DESIGN.md §3, where the compiler cannot see it. Each
//! layer is a crate of its own (`jarvis-sdk/crates/`), so an upward import
//! does not compile; this checks that the crates' manifests point downward
//! (a lower crate depending on a higher one would compile), that a domain
//! pack (`src/packs/`) uses only what `lib.rs` exports publicly, as a third
//! party's pack would, and that no file outside a pack names its domain.
//! The pack check scans the sources for inward paths in every form, and
//! proves the scanner on samples.

use std::path::{Path, PathBuf};

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

/// Every `crate::`, `super::` or `self::` path in a file's source, resolved:
/// `(the module it appears in, the absolute path it names)`; `module` is the
/// file's module path.
fn resolved_paths(module: &[String], src: &str) -> Vec<(Vec<String>, Vec<String>)> {
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
            if let Some(abs) = resolve(&here, &path) {
                found.push((here.clone(), abs));
            }
        }
    }
    found
}

/// The names `lib.rs` exports publicly: `pub use` items (their last
/// segment, or their alias) and `pub mod` modules.
fn root_exports(lib: &str) -> std::collections::BTreeSet<String> {
    let toks = tokenize(lib);
    let mut names = std::collections::BTreeSet::new();
    let mut i = 0;
    while i < toks.len() {
        let public = toks[i] == Tok::Ident("pub".into());
        match toks.get(i + 1) {
            Some(Tok::Ident(k)) if public && k == "use" => {
                let start = i + 2;
                let mut j = start;
                let mut paths = Vec::new();
                use_tree(&toks, &mut j, Vec::new(), &mut paths);
                // An alias (`Name as Alias`) exports the alias only.
                let mut aliased = std::collections::BTreeSet::new();
                for w in start..j {
                    if toks[w] == Tok::Ident("as".into())
                        && let (Some(Tok::Ident(name)), Some(Tok::Ident(alias))) =
                            (toks.get(w - 1), toks.get(w + 1))
                    {
                        aliased.insert(name.clone());
                        names.insert(alias.clone());
                    }
                }
                names.extend(
                    paths
                        .into_iter()
                        .filter_map(|p| p.last().cloned())
                        .filter(|n| !aliased.contains(n)),
                );
                i = j;
            }
            Some(Tok::Ident(k)) if public && k == "mod" => {
                if let Some(Tok::Ident(name)) = toks.get(i + 2) {
                    names.insert(name.clone());
                }
                i += 3;
            }
            _ => i += 1,
        }
    }
    names
}

/// Paths in a pack's file (`module` starts with `packs`) that reach into
/// the crate other than through `exports` (the crate root's public names)
/// or the pack modules themselves.
fn pack_violations(
    module: &[String],
    src: &str,
    exports: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    if module.first().map(String::as_str) != Some("packs") {
        return Vec::new();
    }
    resolved_paths(module, src)
        .into_iter()
        .filter(|(_, abs)| match abs.first().map(String::as_str) {
            None | Some("packs") => false,
            Some(name) => !exports.contains(name),
        })
        .map(|(here, abs)| format!("{} -> {}", here.join("::"), abs.join("::")))
        .collect()
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

#[test]
fn the_pack_scanner_ignores_comments_strings_and_chars() {
    let exports = root_exports("pub use core::Tool;");
    let at = |src: &str| pack_violations(&module_of(Path::new("packs/p/x.rs")), src, &exports);
    assert!(at("// use crate::core::X;\n/* crate::core::f() /* nested */ */").is_empty());
    assert!(
        at(r##"const S: &str = "crate::app::f()"; const R: &str = r#"use crate::core::X;"#;"##).is_empty()
    );
    assert!(at("fn f<'a>(x: &'a str) -> char { let _ = 'c'; '\\'' }").is_empty());
    assert_eq!(at("fn f<'a>() { crate::core::g() }"), ["packs::p::x -> core::g"]);
}

#[test]
fn the_pack_scanner_allows_only_public_root_names() {
    let exports = root_exports(
        "mod core; pub mod packs; pub use core::{Tool, ToolContext as Context}; pub(crate) use core::Hidden; pub use common::{a::B, C};",
    );
    let names: Vec<&str> = exports.iter().map(String::as_str).collect();
    assert_eq!(names, ["B", "C", "Context", "Tool", "packs"]);
    let at = |path: &str, src: &str| pack_violations(&module_of(Path::new(path)), src, &exports);
    assert!(
        at(
            "packs/p/x.rs",
            "use crate::{Tool, Context}; use super::y::Z; fn f() { crate::C::new(); }"
        )
        .is_empty()
    );
    assert!(
        at(
            "packs/p/x.rs",
            "use crate::packs::p::y::Z; use serde::Deserialize;"
        )
        .is_empty()
    );
    assert_eq!(
        at("packs/p/x.rs", "use crate::core::Tool;"),
        ["packs::p::x -> core::Tool"]
    );
    assert_eq!(
        at("packs/p/x.rs", "use crate::Hidden;"),
        ["packs::p::x -> Hidden"]
    );
    assert_eq!(
        at("packs/p/x.rs", "fn f() { super::super::super::core::g() }"),
        ["packs::p::x -> core::g"]
    );
    assert_eq!(
        at("packs/p/mod.rs", "mod t { use super::super::super::agent::Y; }"),
        ["packs::p::t -> agent::Y"]
    );
    assert!(
        at("core/x.rs", "use crate::core::Tool;").is_empty(),
        "only packs are held to it"
    );
}

#[test]
fn packs_use_only_the_public_api() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let exports = root_exports(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    assert!(exports.contains("Pack") && exports.contains("Tool") && exports.contains("packs"));
    let mut files = Vec::new();
    rust_files(&src.join("packs"), &mut files);
    assert!(files.len() > 10, "the housing pack's files are scanned");
    let mut all = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        all.extend(
            pack_violations(&module_of(rel), &text, &exports)
                .into_iter()
                .map(|v| format!("{}: {v}", rel.display())),
        );
    }
    assert!(
        all.is_empty(),
        "packs reaching past the public API:\n{}",
        all.join("\n")
    );
}

/// With the default features, the SDK compiles no domain: no source file
/// outside a pack's own folder names the housing domain.
#[test]
fn no_file_outside_the_housing_pack_names_housing() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let pack = src.join("packs").join("housing");
    let mut files = Vec::new();
    fn all_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                all_files(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    all_files(&src, &mut files);
    let root = src.parent().unwrap();
    all_files(&root.join("crates"), &mut files);
    let naming: Vec<String> = files
        .iter()
        .filter(|f| !f.starts_with(&pack))
        .filter(|f| {
            std::fs::read(f)
                .map(|b| String::from_utf8_lossy(&b).to_lowercase().contains("housing"))
                .unwrap_or(false)
        })
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert!(
        naming.is_empty(),
        "files outside packs/housing naming it: {naming:?}"
    );
}

/// The layer crates, bottom to top, then the facade over them.
const CRATES: [&str; 7] = [
    "jarvis-common",
    "jarvis-model",
    "jarvis-memory",
    "jarvis-agent",
    "jarvis-core",
    "jarvis-app",
    "jarvis-sdk",
];

/// The `jarvis-*` packages a manifest depends on outside its dev-dependencies.
fn jarvis_dependencies(manifest: &str) -> Vec<String> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
        } else if section.ends_with("dependencies") && !section.contains("dev-dependencies") {
            let name = line.split(['=', '.', ' ']).next().unwrap_or("");
            if name.starts_with("jarvis-") {
                out.push(name.to_string());
            }
        }
    }
    out
}

#[test]
fn the_layer_crates_depend_only_downward() {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (rank, name) in CRATES.iter().enumerate() {
        let dir = if *name == "jarvis-sdk" {
            sdk.to_path_buf()
        } else {
            sdk.join("crates").join(name)
        };
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        for dep in jarvis_dependencies(&manifest) {
            let below = CRATES.iter().position(|c| *c == dep).is_some_and(|r| r < rank);
            assert!(below, "{name} depends on {dep}, which is not a layer below it");
        }
    }
    assert_eq!(
        jarvis_dependencies(
            "[dependencies]\njarvis-model.workspace = true\n[dev-dependencies]\njarvis-sdk = { path = \".\" }\n[target.'cfg(unix)'.dependencies]\njarvis-x = \"1\""
        ),
        ["jarvis-model", "jarvis-x"],
        "the manifest reader sees every dependency section but the dev ones"
    );
}
