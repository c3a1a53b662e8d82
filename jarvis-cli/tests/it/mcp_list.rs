//! `jarvis mcp list`: each MCP server of the home, its state and its tools,
//! with the real `mcp-server-time` (from `target/mcp-cache/`, installed by
//! `.ci/run`) and a server that cannot start.

use std::path::Path;

use super::{TempHome, jarvis, text, wait_output};

#[test]
fn mcp_list_shows_each_server_its_state_and_tools() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("target/mcp-cache/py/bin/python");
    if !python.exists() {
        let what = format!("{} is not installed (.ci/run installs it)", python.display());
        assert_ne!(
            std::env::var("JARVIS_REQUIRE_MCP").as_deref(),
            Ok("1"),
            "JARVIS_REQUIRE_MCP=1 but {what}"
        );
        eprintln!("\n!!!!!!!! SKIPPED: {what} !!!!!!!!\n");
        return;
    }
    let home = TempHome::new();
    std::fs::create_dir_all(&home.0).unwrap();
    std::fs::write(
        home.0.join("mcp.yaml"),
        format!(
            "servers:\n  time:\n    command: {}\n    args: [\"-m\", \"mcp_server_time\", \"--local-timezone\", \"Asia/Seoul\"]\n    approval: read_only_allow\n  broken:\n    command: /nonexistent/mcp-server\n    agents: [karen]\n",
            python.display()
        ),
    )
    .unwrap();
    let child = jarvis(&home.0)
        .args(["mcp", "list"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let output = wait_output(child);
    let out = text(&output.stdout);
    assert!(output.status.success(), "{out}\n{}", text(&output.stderr));
    assert!(
        out.contains("broken (shared) restarting  /nonexistent/mcp-server"),
        "{out}"
    );
    assert!(out.contains("! cannot run /nonexistent/mcp-server"), "{out}");
    assert!(out.contains("time (shared) running pid "), "{out}");
    assert!(out.contains("  time__get_current_time"), "{out}");
    assert!(out.contains("  time__convert_time"), "{out}");
}
