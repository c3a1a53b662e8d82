//! The SDK's normal dependencies stay lean: no HTTP server, no terminal UI,
//! no database client in a default build (DESIGN.md §3, §6); its one
//! database is SQLite compiled in (feature `sqlite`), which a build without
//! default features leaves out too.

use std::process::Command;

fn normal_deps(features: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "tree",
        "-p",
        "jarvis-sdk",
        "-e",
        "normal",
        "--prefix",
        "none",
        "--offline",
    ]);
    cmd.args(features);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
    let out = cmd.output().expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

const NEVER: [&str; 9] = [
    "axum",
    "actix-web",
    "warp",
    "rocket",
    "clap",
    "crossterm",
    "ratatui",
    "rustyline",
    "fantoccini",
];
const NOT_BY_DEFAULT: [&str; 4] = ["tokio-postgres", "deadpool-postgres", "postgres", "insta"];

#[test]
fn the_default_build_has_no_server_terminal_or_database_crates() {
    let deps = normal_deps(&[]);
    assert!(deps.iter().any(|d| d == "jarvis-sdk"), "{deps:?}");
    for bad in NEVER.iter().chain(&NOT_BY_DEFAULT) {
        assert!(
            !deps.iter().any(|d| d == bad),
            "{bad} is a normal dependency of jarvis-sdk"
        );
    }
}

#[test]
fn sqlite_is_compiled_in_by_default_and_only_with_its_feature() {
    let default = normal_deps(&[]);
    for wanted in ["rusqlite", "libsqlite3-sys"] {
        assert!(
            default.iter().any(|d| d == wanted),
            "{wanted} is missing by default"
        );
    }
    let bare = normal_deps(&["--no-default-features"]);
    for unwanted in ["rusqlite", "libsqlite3-sys"] {
        assert!(
            !bare.iter().any(|d| d == unwanted),
            "{unwanted} without the sqlite feature"
        );
    }
}

#[test]
fn the_postgres_feature_brings_the_database_client() {
    let deps = normal_deps(&["--features", "postgres"]);
    for wanted in ["tokio-postgres", "deadpool-postgres"] {
        assert!(
            deps.iter().any(|d| d == wanted),
            "{wanted} is missing with --features postgres"
        );
    }
}

#[test]
fn no_feature_brings_a_server_or_terminal_crate() {
    let deps = normal_deps(&["--all-features"]);
    for bad in NEVER {
        assert!(
            !deps.iter().any(|d| d == bad),
            "{bad} is a dependency of jarvis-sdk with all features"
        );
    }
}
