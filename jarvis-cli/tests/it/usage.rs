//! `jarvis usage`: the tokens and cost of the turns so far, by agent,
//! session or day, read in process or from the running server.

use super::{Running, TempHome, jarvis, scripted, signal, text, wait_output};
use std::process::{Command, Output, Stdio};

/// JARVIS on a priced model, K.A.R.E.N. on one without a price.
const SCRIPT: &str = r#"
rules:
  - when: { agent: main }
    reply: { text: "네, 주인님.", usage: { input_tokens: 1000, output_tokens: 200, cached_input_tokens: 400 } }
  - when: { agent: karen }
    reply: { text: "찾았습니다.", usage: { input_tokens: 300, output_tokens: 50 } }
"#;

fn run(cmd: &mut Command) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child)
}

/// The cells of the table's line for `key`.
fn cells<'a>(table: &'a str, key: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&key))
        .unwrap_or_default()
}

fn priced(home: &TempHome) -> Command {
    let mut cmd = scripted(home, SCRIPT);
    cmd.env("JARVIS_LLM__MODEL", "lead-model");
    cmd
}

#[test]
fn usage_prints_tokens_and_cost_by_agent_session_and_day() {
    let home = TempHome::new();
    std::fs::create_dir_all(home.0.join("team")).unwrap();
    std::fs::write(
        home.0.join("team/karen.yaml"),
        "name: K.A.R.E.N.\nmodel: field-model\n",
    )
    .unwrap();
    std::fs::write(
        home.0.join("prices.yaml"),
        "lead-model: { input: 2.5, output: 10, cached_input: 1.25 }\n",
    )
    .unwrap();
    let out = run(jarvis(&home.0).arg("usage"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "no usage recorded yet\n");

    for args in [
        ["ask", "안녕", "--agent", "main"],
        ["ask", "찾아 줘", "--agent", "karen"],
    ] {
        let out = run(priced(&home).args(args));
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let out = run(jarvis(&home.0).arg("usage"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    // 600 fresh × 2.5 + 400 cached × 1.25 + 200 out × 10, per million.
    assert_eq!(
        cells(&table, "main"),
        ["main", "1", "1000", "200", "400", "0.004000"],
        "{table}"
    );
    assert_eq!(
        cells(&table, "karen"),
        ["karen", "1", "300", "50", "0", "—"],
        "an unknown cost is a dash, never 0: {table}"
    );
    assert_eq!(
        cells(&table, "total"),
        ["total", "2", "1300", "250", "400", "—"],
        "{table}"
    );

    // With the server running, the same table comes from GET /api/usage.
    let mut server = Running::start(priced(&home).args(["--port", "0", "--no-open"]));
    server.expect(0, "HUD: http://127.0.0.1:");
    let out = run(jarvis(&home.0).args(["usage", "--by", "session"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("talking to the server"),
        "{}",
        text(&out.stderr)
    );
    let table = text(&out.stdout);
    assert!(table.starts_with("session "), "{table}");
    assert!(table.contains("\ndefault-karen "), "{table}");
    assert!(table.contains("\ndefault-main "), "{table}");
    let out = run(jarvis(&home.0).args(["usage", "--by", "day"]));
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let day = table.lines().nth(1).unwrap_or_default();
    assert!(
        day.len() > 10 && day.as_bytes()[4] == b'-' && day.as_bytes()[7] == b'-' && day.contains(" 2 "),
        "one day, YYYY-MM-DD: {table}"
    );
    signal(server.pid(), "TERM");
    let (status, out, err) = server.finish();
    assert!(status.success(), "{out}\n{err}");

    let out = run(jarvis(&home.0).args(["usage", "--by", "week"]));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("one of agent, session or day"),
        "{}",
        text(&out.stderr)
    );
}
