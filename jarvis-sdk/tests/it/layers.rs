//! The layer rule of DESIGN.md §3, where the compiler cannot see it. Each
//! layer is a crate of its own (`jarvis-sdk/crates/`), so an upward import
//! does not compile; this checks that the crates' manifests point downward
//! (a lower crate depending on a higher one would compile), that a domain
//! pack (`jarvis-sdk/packs/`) depends on the facade alone, as a third
//! party's pack would, that no file of the SDK names a pack's domain,
//! and that no public field exists only under a cargo feature.

use std::path::{Path, PathBuf};

/// Every file under `dir`, recursively.
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

/// With any features, the SDK compiles no domain: no file of the facade or
/// of a layer crate names the housing domain (its pack is a crate of its
/// own that the SDK does not depend on).
#[test]
fn no_file_of_the_sdk_names_housing() {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    all_files(&sdk.join("src"), &mut files);
    all_files(&sdk.join("crates"), &mut files);
    assert!(files.len() > 100, "the SDK's files are scanned");
    let naming: Vec<String> = files
        .iter()
        .filter(|f| {
            std::fs::read(f)
                .map(|b| String::from_utf8_lossy(&b).to_lowercase().contains("housing"))
                .unwrap_or(false)
        })
        .map(|f| f.strip_prefix(sdk).unwrap().display().to_string())
        .collect();
    assert!(naming.is_empty(), "SDK files naming housing: {naming:?}");
}

/// The layer crates, bottom to top, then the facade over them.
const CRATES: [&str; 8] = [
    "jarvis-common",
    "jarvis-model",
    "jarvis-memory",
    "jarvis-agent",
    "jarvis-turn",
    "jarvis-initiative",
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

/// A pack is written against the facade alone: its manifest depends on
/// `jarvis-sdk` and on no layer crate.
#[test]
fn packs_depend_on_the_facade_alone() {
    let packs = Path::new(env!("CARGO_MANIFEST_DIR")).join("packs");
    let mut seen = 0;
    for entry in std::fs::read_dir(&packs).unwrap() {
        let manifest = std::fs::read_to_string(entry.unwrap().path().join("Cargo.toml")).unwrap();
        assert_eq!(jarvis_dependencies(&manifest), ["jarvis-sdk"], "{manifest}");
        seen += 1;
    }
    assert!(seen >= 1, "the housing pack is checked");
}

/// Public fields that exist only under a cargo feature, as `file:line
/// field` (a field whose attributes above it carry `cfg(feature …)`).
fn feature_only_fields(path: &str, src: &str) -> Vec<String> {
    let lines: Vec<&str> = src.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(field) = line.trim_start().strip_prefix("pub ") else {
            continue;
        };
        let Some((name, _)) = field.split_once(": ") else {
            continue;
        };
        if !line.starts_with(' ') || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let gated = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.trim_start().starts_with("///") || l.trim_start().starts_with("#["))
            .any(|l| l.contains("cfg(feature") && !l.contains("cfg_attr"));
        if gated {
            found.push(format!("{path}:{} {name}", i + 1));
        }
    }
    found
}

/// A struct outsiders build keeps one shape whatever features another
/// crate of the app turns on: no public field exists only under a feature
/// (a part that needs a feature is set through a method instead, on a
/// `non_exhaustive` struct).
#[test]
fn no_public_field_exists_only_under_a_feature() {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    all_files(&sdk.join("crates"), &mut files);
    let found: Vec<String> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            feature_only_fields(&f.strip_prefix(sdk).unwrap().display().to_string(), &text)
        })
        .collect();
    assert!(found.is_empty(), "public fields behind a feature: {found:?}");
    let sample = "struct A {\n    /// Doc.\n    #[cfg(feature = \"x\")]\n    pub b: u8,\n    #[cfg_attr(feature = \"x\", allow(dead_code))]\n    pub c: u8,\n    #[cfg(feature = \"x\")]\n    pub(crate) d: u8,\n}";
    assert_eq!(
        feature_only_fields("a.rs", sample),
        ["a.rs:4 b"],
        "the scanner sees a gated field"
    );
}

/// Lines of a source file before its unit tests (the first line that is
/// `#[cfg(test)]`, at the start of a line): the code a reader must hold.
fn code_lines(src: &str) -> usize {
    src.lines()
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .count()
}

/// No source file of the workspace holds more than about 800 lines of code
/// (integration tests, unit test modules, in a file's `#[cfg(test)]` tail
/// or a `tests.rs` of their own, and the vendored usearch aside):
/// a file past that is more than one idea and is split by concern.
#[test]
fn no_source_file_holds_more_than_800_lines_of_code() {
    const LIMIT: usize = 800;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for dir in [
        "jarvis-sdk/src",
        "jarvis-sdk/crates",
        "jarvis-sdk/packs",
        "jarvis-sdk/examples",
        "jarvis-server/src",
        "jarvis-server/examples",
        "jarvis-cli/src",
        "examples",
    ] {
        all_files(&root.join(dir), &mut files);
    }
    let sources: Vec<&PathBuf> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .filter(|f| !f.components().any(|c| c.as_os_str() == "tests"))
        .filter(|f| !f.ends_with("tests.rs"))
        .collect();
    assert!(sources.len() > 200, "the workspace's files are scanned");
    let long: Vec<String> = sources
        .iter()
        .filter_map(|f| {
            let lines = code_lines(&std::fs::read_to_string(f).unwrap());
            (lines > LIMIT).then(|| format!("{} ({lines})", f.strip_prefix(root).unwrap().display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {LIMIT} lines of code: {long:?}");
}
