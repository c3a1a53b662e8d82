//! The sandbox escape suite: every way out is refused with its typed error,
//! through the `Sandbox` API and through the tools, and nothing outside the
//! sandbox is read or written. Legitimate paths (nested directories,
//! symlinks that stay inside, Hangul names, `..` that stays inside) work.

use jarvis_sdk::turn::{EntryKind, Sandbox, SandboxError};
use serde_json::json;
use std::os::unix::fs::symlink;

use super::{CANARY, Fixture};

/// A sandbox for session `s` with the traps of the suite planted in it:
///
/// ```text
/// etc          -> /etc
/// canary_abs   -> <outside>/canary.txt   (absolute, leads out)
/// canary_rel   -> ../../outside/canary.txt (relative, leads out)
/// outside_dir  -> <outside>
/// dangling_abs -> <outside>/created-by-abs.txt   (does not exist)
/// dangling_rel -> ../../outside/created-by-rel.txt (does not exist)
/// loop_a -> loop_b, loop_b -> loop_a, self_loop -> self_loop
/// sub/         a directory to climb out of
/// ```
fn trapped() -> (Fixture, Sandbox) {
    let fx = Fixture::new();
    let root = fx.sandbox("s");
    let outside = fx.outside();
    symlink("/etc", root.join("etc")).unwrap();
    symlink(outside.join("canary.txt"), root.join("canary_abs")).unwrap();
    symlink("../../outside/canary.txt", root.join("canary_rel")).unwrap();
    symlink(&outside, root.join("outside_dir")).unwrap();
    symlink(outside.join("created-by-abs.txt"), root.join("dangling_abs")).unwrap();
    symlink("../../outside/created-by-rel.txt", root.join("dangling_rel")).unwrap();
    symlink("loop_b", root.join("loop_a")).unwrap();
    symlink("loop_a", root.join("loop_b")).unwrap();
    symlink("self_loop", root.join("self_loop")).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    // Sanity: the relative trap really resolves to the canary on the host.
    assert_eq!(std::fs::read_to_string(root.join("canary_rel")).unwrap(), CANARY);
    let sandbox = Sandbox::open(&fx.base(), "s").unwrap();
    (fx, sandbox)
}

fn long_path() -> String {
    "a/".repeat(2000) + "x"
}

#[track_caller]
fn assert_refused(result: Result<impl std::fmt::Debug, SandboxError>, expected: fn(&SandboxError) -> bool) {
    match result {
        Err(e) if expected(&e) => {
            let text = e.to_string();
            assert!(text.starts_with("sandbox: "), "{text}");
            assert!(!text.contains(CANARY), "{text}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn reads_that_leave_the_sandbox_are_refused() {
    let (_fx, sb) = trapped();
    let abs = _fx.outside().join("canary.txt").display().to_string();
    let escape = |e: &SandboxError| matches!(e, SandboxError::Escape { .. });
    for path in [
        "../outside/canary.txt",
        "../../outside/canary.txt",
        "a/../../outside/canary.txt",
        "sub/../../outside/canary.txt",
        "etc/passwd",
        "etc/hostname",
        "canary_abs",
        "canary_rel",
        "outside_dir/canary.txt",
        "dangling_abs",
        "dangling_rel",
    ] {
        assert_refused(sb.read(path, 1 << 20), escape);
    }
    assert_refused(sb.read(&abs, 1 << 20), |e| {
        matches!(e, SandboxError::AbsolutePath { .. })
    });
    assert_refused(sb.read("/etc/passwd", 1 << 20), |e| {
        matches!(e, SandboxError::AbsolutePath { .. })
    });
    for path in ["loop_a", "self_loop", "loop_b/x"] {
        assert_refused(sb.read(path, 1 << 20), |e| {
            matches!(e, SandboxError::SymlinkLoop { .. })
        });
    }
    assert_refused(sb.read("canary\0.txt", 1 << 20), |e| {
        matches!(e, SandboxError::NulByte { .. })
    });
    assert_refused(sb.read(&long_path(), 1 << 20), |e| {
        matches!(e, SandboxError::PathTooLong { .. })
    });
    assert_refused(sb.read(&"n".repeat(300), 1 << 20), |e| {
        matches!(e, SandboxError::ComponentTooLong { .. })
    });
}

#[test]
fn listings_that_leave_the_sandbox_are_refused() {
    let (_fx, sb) = trapped();
    let escape = |e: &SandboxError| matches!(e, SandboxError::Escape { .. });
    for path in ["..", "../outside", "sub/../..", "etc", "outside_dir", "etc/ssl"] {
        assert_refused(sb.list(path, 100), escape);
    }
    assert_refused(sb.list("/", 100), |e| {
        matches!(e, SandboxError::AbsolutePath { .. })
    });
    assert_refused(sb.list("loop_a", 100), |e| {
        matches!(e, SandboxError::SymlinkLoop { .. })
    });
    // The listing shows the traps as symlinks without following them.
    let listing = sb.list(".", 100).unwrap();
    let etc = listing.entries.iter().find(|e| e.name == "etc").unwrap();
    assert_eq!(etc.kind, EntryKind::Symlink);
}

#[test]
fn writes_that_leave_the_sandbox_are_refused_and_create_nothing() {
    let (fx, sb) = trapped();
    let before = fx.outside_snapshot();
    let abs = fx.outside().join("created-by-abs-path.txt").display().to_string();
    let escape = |e: &SandboxError| matches!(e, SandboxError::Escape { .. });
    for path in [
        "../outside/created.txt",
        "../../outside/created.txt",
        "a/../../outside/created.txt",
        "outside_dir/created.txt",
        "outside_dir/new_dir/created.txt",
        "etc/jarvis-escape.txt",
        "canary_abs",
        "canary_rel",
        "dangling_abs",
        "dangling_rel",
    ] {
        assert_refused(sb.write(path, b"pwned"), escape);
    }
    assert_refused(sb.write(&abs, b"pwned"), |e| {
        matches!(e, SandboxError::AbsolutePath { .. })
    });
    assert_refused(sb.write("loop_a", b"pwned"), |e| {
        matches!(e, SandboxError::SymlinkLoop { .. })
    });
    assert_refused(sb.write("loop_a/x", b"pwned"), |e| {
        matches!(e, SandboxError::SymlinkLoop { .. })
    });
    assert_refused(sb.write("x\0y", b"pwned"), |e| {
        matches!(e, SandboxError::NulByte { .. })
    });
    assert_refused(sb.write(&long_path(), b"pwned"), |e| {
        matches!(e, SandboxError::PathTooLong { .. })
    });
    assert_eq!(
        fx.outside_snapshot(),
        before,
        "something outside the sandbox changed"
    );
    assert!(!std::path::Path::new("/etc/jarvis-escape.txt").exists());
    // The traps themselves are untouched: still symlinks, not replaced.
    let root = sb.root();
    for link in ["canary_abs", "canary_rel", "dangling_abs", "dangling_rel"] {
        assert!(
            std::fs::symlink_metadata(root.join(link)).unwrap().is_symlink(),
            "{link}"
        );
    }
}

#[test]
fn session_ids_that_are_not_one_safe_component_are_refused() {
    let fx = Fixture::new();
    for id in [
        "../evil",
        "..",
        ".",
        "a/b",
        "/tmp/x",
        "",
        "s\0",
        "세션",
        &"x".repeat(129),
    ] {
        assert_refused(Sandbox::open(&fx.base(), id), |e| {
            matches!(e, SandboxError::InvalidSessionId { .. })
        });
    }
    assert!(!fx.tmp.path().join("evil").exists());
    // The ids were refused before anything was created, the base included.
    assert!(!fx.base().exists());
}

#[test]
fn a_session_directory_planted_as_a_symlink_is_refused() {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.base()).unwrap();
    symlink(fx.outside(), fx.base().join("planted")).unwrap();
    assert_refused(Sandbox::open(&fx.base(), "planted"), |e| {
        matches!(e, SandboxError::Escape { .. })
    });
}

#[tokio::test]
async fn the_tools_refuse_the_same_and_leak_nothing() {
    let (fx, _sb) = trapped();
    let before = fx.outside_snapshot();
    let abs = fx.outside().join("canary.txt").display().to_string();
    let long = long_path();
    let attacks = [
        (
            "read_file",
            json!({"path": "../outside/canary.txt"}),
            "leads outside the sandbox",
        ),
        (
            "read_file",
            json!({"path": "a/../../outside/canary.txt"}),
            "leads outside the sandbox",
        ),
        ("read_file", json!({"path": abs}), "absolute path"),
        (
            "read_file",
            json!({"path": "etc/passwd"}),
            "leads outside the sandbox",
        ),
        (
            "read_file",
            json!({"path": "canary_abs"}),
            "leads outside the sandbox",
        ),
        (
            "read_file",
            json!({"path": "canary_rel"}),
            "leads outside the sandbox",
        ),
        (
            "read_file",
            json!({"path": "loop_a"}),
            "too many levels of symbolic links",
        ),
        ("read_file", json!({"path": "canary\u{0}.txt"}), "NUL byte"),
        ("read_file", json!({"path": long}), "path is too long"),
        ("list_dir", json!({"path": ".."}), "leads outside the sandbox"),
        ("list_dir", json!({"path": "etc"}), "leads outside the sandbox"),
        ("list_dir", json!({"path": "/"}), "absolute path"),
        (
            "write_file",
            json!({"path": "../outside/x.txt", "content": "pwned"}),
            "leads outside the sandbox",
        ),
        (
            "write_file",
            json!({"path": "outside_dir/x.txt", "content": "pwned"}),
            "leads outside the sandbox",
        ),
        (
            "write_file",
            json!({"path": "canary_abs", "content": "pwned"}),
            "leads outside the sandbox",
        ),
        (
            "write_file",
            json!({"path": "dangling_rel", "content": "pwned"}),
            "leads outside the sandbox",
        ),
        (
            "write_file",
            json!({"path": abs, "content": "pwned"}),
            "absolute path",
        ),
        (
            "write_file",
            json!({"path": "self_loop", "content": "pwned"}),
            "too many levels of symbolic links",
        ),
    ];
    for (tool, args, says) in attacks {
        let result = fx.call(tool, "s", args.clone()).await;
        assert!(result.is_error, "{tool} {args}: {result:?}");
        assert!(result.content.contains(says), "{tool} {args}: {}", result.content);
        assert!(!result.content.contains(CANARY), "{tool} leaked the canary");
    }
    // A session id that would climb out is refused before any path is used.
    for session in ["../outside", "a/b", ".."] {
        let result = fx.call("read_file", session, json!({"path": "canary.txt"})).await;
        assert!(
            result.is_error && result.content.contains("invalid session id"),
            "{result:?}"
        );
        let result = fx
            .call(
                "write_file",
                session,
                json!({"path": "x.txt", "content": "pwned"}),
            )
            .await;
        assert!(
            result.is_error && result.content.contains("invalid session id"),
            "{result:?}"
        );
    }
    assert_eq!(
        fx.outside_snapshot(),
        before,
        "something outside the sandbox changed"
    );
}

#[tokio::test]
async fn legitimate_paths_work() {
    let fx = Fixture::new();
    let root = fx.sandbox("s");
    let ok = |r: &jarvis_sdk::agent::ToolResult| assert!(!r.is_error, "{r:?}");

    // Nested directories are created; Hangul names round-trip.
    let r = fx
        .call(
            "write_file",
            "s",
            json!({"path": "보고서/2024/요약.txt", "content": "주택 예산 3억"}),
        )
        .await;
    ok(&r);
    let len = "주택 예산 3억".len();
    assert_eq!(
        r.content,
        format!("wrote {len} bytes to \"보고서/2024/요약.txt\"")
    );
    let r = fx
        .call("read_file", "s", json!({"path": "보고서/2024/요약.txt"}))
        .await;
    assert_eq!(r, jarvis_sdk::agent::ToolResult::ok("주택 예산 3억"));
    let r = fx
        .call(
            "read_file",
            "s",
            json!({"path": "./보고서/../보고서/2024/요약.txt"}),
        )
        .await;
    assert_eq!(r.content, "주택 예산 3억");

    // Symlinks that stay inside are followed, for reading and writing.
    symlink("보고서/2024/요약.txt", root.join("latest")).unwrap();
    symlink("보고서", root.join("reports")).unwrap();
    let r = fx.call("read_file", "s", json!({"path": "latest"})).await;
    assert_eq!(r.content, "주택 예산 3억");
    let r = fx
        .call("read_file", "s", json!({"path": "reports/2024/요약.txt"}))
        .await;
    assert_eq!(r.content, "주택 예산 3억");
    let r = fx
        .call("write_file", "s", json!({"path": "latest", "content": "4억"}))
        .await;
    ok(&r);
    assert!(
        std::fs::symlink_metadata(root.join("latest"))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(root.join("보고서/2024/요약.txt")).unwrap(),
        "4억"
    );
    let r = fx
        .call(
            "write_file",
            "s",
            json!({"path": "reports/2025/계획.txt", "content": "새 집"}),
        )
        .await;
    ok(&r);
    assert_eq!(
        std::fs::read_to_string(root.join("보고서/2025/계획.txt")).unwrap(),
        "새 집"
    );

    // Listings are sorted and show kind and size; the default path is ".".
    let r = fx.call("list_dir", "s", json!({})).await;
    ok(&r);
    let lines: Vec<&str> = r.content.lines().collect();
    assert_eq!(lines.len(), 3, "{}", r.content);
    assert!(
        lines[0].starts_with("symlink") && lines[0].ends_with("  latest"),
        "{}",
        r.content
    );
    assert!(
        lines[1].starts_with("symlink") && lines[1].ends_with("  reports"),
        "{}",
        r.content
    );
    assert!(
        lines[2].starts_with("dir") && lines[2].ends_with("  보고서/"),
        "{}",
        r.content
    );
    let r = fx.call("list_dir", "s", json!({"path": "reports/2024"})).await;
    assert_eq!(r.content, format!("file    {:>10}  요약.txt", "4억".len()));
    let r = fx
        .call("list_dir", "s", json!({"path": "보고서/2024/요약.txt"}))
        .await;
    assert!(r.is_error && r.content.contains("is not a directory"), "{r:?}");

    // What does not exist, or is not a file, says so.
    let r = fx.call("read_file", "s", json!({"path": "nope.txt"})).await;
    assert!(r.is_error && r.content.contains("does not exist"), "{r:?}");
    let r = fx.call("read_file", "s", json!({"path": "보고서"})).await;
    assert!(r.is_error && r.content.contains("is not a regular file"), "{r:?}");
    let r = fx
        .call("write_file", "s", json!({"path": ".", "content": "x"}))
        .await;
    assert!(r.is_error, "{r:?}");
    // No temporary file is left behind by the atomic writes.
    let names: Vec<_> = std::fs::read_dir(root.join("보고서/2024"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("요약.txt")]);
}

#[tokio::test]
async fn sizes_and_counts_are_capped() {
    let fx = Fixture::new().with(|c| {
        c.read_cap = 1000;
        c.write_cap = 2000;
        c.list_cap = 3;
    });
    let root = fx.sandbox("s");
    std::fs::write(root.join("big.txt"), "x".repeat(5000)).unwrap();
    let r = fx.call("read_file", "s", json!({"path": "big.txt"})).await;
    assert!(!r.is_error);
    assert!(r.content.starts_with(&"x".repeat(1000)));
    assert!(
        r.content
            .ends_with("\n[truncated: showing the first 1000 of 5000 bytes]"),
        "{}",
        r.content
    );

    let r = fx
        .call(
            "write_file",
            "s",
            json!({"path": "huge.txt", "content": "y".repeat(2001)}),
        )
        .await;
    assert!(r.is_error && r.content.contains("too large"), "{r:?}");
    assert!(!root.join("huge.txt").exists());

    for name in ["e", "d", "c", "b"] {
        std::fs::write(root.join(name), name).unwrap();
    }
    let r = fx.call("list_dir", "s", json!({"path": "."})).await;
    let names: Vec<&str> = r
        .content
        .lines()
        .map(|l| l.rsplit("  ").next().unwrap())
        .collect();
    assert_eq!(names, ["b", "big.txt", "c", "[showing the first 3 of 5 entries]"]);

    // Binary files are refused clearly; invalid UTF-8 text is shown lossily.
    std::fs::write(root.join("bin"), b"\x7fELF\x00\x01").unwrap();
    let r = fx.call("read_file", "s", json!({"path": "bin"})).await;
    assert!(r.is_error && r.content.contains("binary"), "{r:?}");
    std::fs::write(root.join("latin1.txt"), b"caf\xe9").unwrap();
    let r = fx.call("read_file", "s", json!({"path": "latin1.txt"})).await;
    assert!(!r.is_error && r.content.starts_with("caf\u{fffd}") && r.content.contains("not valid UTF-8"));
}

#[tokio::test]
async fn a_fifo_is_refused_without_blocking() {
    let fx = Fixture::new();
    let root = fx.sandbox("s");
    let made = std::process::Command::new("mkfifo")
        .arg(root.join("pipe"))
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        fx.call("read_file", "s", json!({"path": "pipe"})),
    )
    .await
    .expect("reading a FIFO must not block");
    assert!(r.is_error && r.content.contains("is not a regular file"), "{r:?}");
}
