//! The front door holds: README's Rust snippets are taken verbatim from the
//! examples (which CI builds and runs), so they cannot drift from code that
//! compiles, and every relative link of README.md, ARCHITECTURE.md and the
//! guides in `docs/` reaches a file, and a heading where it names one.
//! README.md stays at most 250 lines and ARCHITECTURE.md at most 600.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The bodies of the fenced blocks whose info string is exactly `lang`.
fn blocks(markdown: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_start().starts_with("```") => {
                current = Some(String::new());
                if line.trim_start().trim_start_matches('`').trim() != lang {
                    current = Some("\0".to_owned()); // another language: skipped
                }
            }
            None => {}
            Some(body) if line.trim_start().starts_with("```") => {
                if !body.starts_with('\0') {
                    out.push(std::mem::take(body));
                }
                current = None;
            }
            Some(body) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    out
}

/// Every `*.rs` file under the workspace's `examples/`.
fn example_sources() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![root().join("examples")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = read(&path);
                out.push((path, text));
            }
        }
    }
    out
}

#[test]
fn every_rust_snippet_of_the_readme_is_part_of_an_example() {
    let readme = read(&root().join("README.md"));
    let snippets = blocks(&readme, "rust");
    assert!(!snippets.is_empty(), "README shows how to embed a team in Rust");
    let sources = example_sources();
    for snippet in &snippets {
        assert!(
            sources.iter().any(|(_, text)| text.contains(snippet.as_str())),
            "this README snippet is not, verbatim, part of any file under examples/:\n{snippet}"
        );
    }
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_`
/// dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of the inline links `](…)` of `markdown`.
fn links(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = markdown;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_owned());
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_docs_reaches_its_file_and_heading() {
    let root = root();
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut checked = 0;
    for page in &pages {
        let text = read(page);
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((link.as_str(), ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            assert!(
                target.exists(),
                "{}: the link {link} reaches nothing",
                page.display()
            );
            if !anchor.is_empty() {
                assert!(
                    anchors(&read(&target)).contains(anchor),
                    "{}: the link {link} names no heading of {}",
                    page.display(),
                    target.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} links checked: the scan is broken");
}

#[test]
fn the_readme_stays_a_front_door() {
    let lines = read(&root().join("README.md")).lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; the rest belongs in docs/"
    );
}

#[test]
fn the_architecture_stays_a_map() {
    let text = read(&root().join("ARCHITECTURE.md"));
    let lines = text.lines().count();
    assert!(
        lines <= 600,
        "ARCHITECTURE.md has {lines} lines; explanations belong in docs/, figures in docs/performance.md"
    );
    for heading in ["## Layers", "## Code map", "## Flows", "## Invariants"] {
        assert!(
            text.lines().any(|l| l == heading),
            "ARCHITECTURE.md has no `{heading}` section"
        );
    }
}

/// The names `jarvis-sdk/src/lib.rs` declares at its root: `pub mod`
/// modules and the last segment (or alias) of each top-level `pub use`.
fn root_names(lib: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut lines = lib.lines();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("pub mod ") {
            names.push(rest.trim_end_matches([' ', '{', ';']).to_owned());
        } else if let Some(rest) = line.strip_prefix("pub use ") {
            let mut tree = rest.to_owned();
            while !tree.contains(';') {
                tree.push_str(lines.next().unwrap_or(";"));
            }
            let tree = tree.split(';').next().unwrap_or_default();
            let items = match tree.split_once('{') {
                Some((_, list)) => list.trim_end_matches('}').split(',').map(str::to_owned).collect(),
                None => vec![tree.to_owned()],
            };
            for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
                let name = item.rsplit([' ', ':']).next().unwrap_or(item);
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// The facade is a front door too: modules per layer and a prelude, not a
/// flat list of every name (at most 80 at its root).
#[test]
fn the_facade_root_is_modules_and_a_prelude() {
    let lib = read(&root().join("jarvis-sdk/src/lib.rs"));
    let names = root_names(&lib);
    for module in [
        "common",
        "model",
        "memory",
        "agent",
        "turn",
        "initiative",
        "app",
        "prelude",
    ] {
        assert!(
            names.iter().any(|n| n == module),
            "no module `{module}` at the root: {names:?}"
        );
    }
    assert!(names.len() <= 80, "{} names at the root: {names:?}", names.len());
    assert_eq!(
        root_names(
            "pub mod a {\npub use x::{B, c::D as E};\npub use f::G;\npub use h::{\n    I,\n    J,\n};"
        ),
        ["a", "B", "E", "G", "I", "J"],
        "the reader sees every root name"
    );
}
