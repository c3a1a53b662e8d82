//! Eval suites: the file's checks and errors, and a run on the faux model
//! whose table, pass rate and threshold verdict follow what the model did.

use jarvis_sdk::app::{AppConfig, EvalSuite, run_eval};
use jarvis_sdk::model::{FauxProvider, FauxScript};
use std::sync::Arc;

const SCRIPT: &str = r#"
rules:
  - when: { last_role: user, last_user: "메모" }
    reply: { tool_calls: [ { name: write_file, arguments: { path: "memo.txt", content: "hi" } } ] }
  - when: { last_role: tool }
    reply: { text: "메모는 못 남겼어요." }
  - when: { last_user: "날씨" }
    reply: { text: "맑아요, 20도." }
fallback: { text: "네." }
"#;

const SUITE: &str = r#"
threshold: 0.5
cases:
  - name: weather
    prompt: 오늘 날씨 어때?
    checks: { contains: ["맑아요", "20도"], regex: "\\d+도", no_tool_called: write_file, max_steps: 1 }
  - name: memo
    prompt: 메모 남겨 줘
    checks: { tool_called: [write_file], contains: 못, max_steps: 2 }
  - name: wrong
    prompt: 안녕
    checks: { contains: 안녕하세요, tool_called: read_file, max_tokens: 0 }
"#;

#[tokio::test]
async fn a_suite_runs_each_case_and_reports_what_failed() {
    let home = tempfile::tempdir().unwrap();
    let faux = FauxProvider::new(FauxScript::from_yaml(SCRIPT).unwrap()).unwrap();
    let config = AppConfig::embedded(home.path()).with_provider(Arc::new(faux));
    let suite = EvalSuite::parse(SUITE).unwrap();
    let report = run_eval(&suite, &config).await;

    let by_name = |name: &str| report.cases.iter().find(|c| c.name == name).unwrap();
    let weather = by_name("weather");
    assert!(weather.passed, "{weather:?}");
    assert_eq!((weather.steps, weather.tools.len()), (1, 0));
    let memo = by_name("memo");
    assert!(memo.passed, "the call was made (and denied): {memo:?}");
    assert_eq!(memo.tools, vec!["write_file".to_owned()]);
    assert_eq!(memo.steps, 2);
    let wrong = by_name("wrong");
    assert!(!wrong.passed);
    assert_eq!(wrong.failures.len(), 3, "{:?}", wrong.failures);
    assert!(wrong.failures[0].contains("안녕하세요"), "{:?}", wrong.failures);
    assert!(
        wrong.failures[1].contains("read_file was not called"),
        "{:?}",
        wrong.failures
    );
    assert!(wrong.failures[2].contains("more than 0"), "{:?}", wrong.failures);

    assert!((report.pass_rate() - 2.0 / 3.0).abs() < 1e-9);
    assert!(report.passed(), "2/3 reaches 0.5");
    let table = report.table();
    assert!(table.contains("2/3 passed (67%), threshold 50%: ok"), "{table}");
    assert!(table.contains("FAIL  wrong"), "{table}");
    assert!(table.contains("pass  memo"), "{table}");

    let mut strict = suite.clone();
    strict.threshold = 0.9;
    let report = run_eval(&strict, &config).await;
    assert!(!report.passed());
    assert!(
        report.table().contains("below the threshold"),
        "{}",
        report.table()
    );
    // Each case ran in a temporary home: nothing was written to this one
    // (not even the home's lock).
    let written: Vec<_> = std::fs::read_dir(home.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(written.is_empty(), "{written:?}");
}

#[test]
fn a_suite_that_cannot_be_used_says_why() {
    for (text, says) in [
        ("cases: []", "no cases"),
        ("threshold: 1.5\ncases: [{name: a, prompt: b}]", "between 0 and 1"),
        (
            "cases: [{name: a, prompt: b}, {name: a, prompt: c}]",
            "used twice",
        ),
        ("cases: [{name: a, prompt: b, checks: {regex: \"(\"}}]", "regex"),
        (
            "cases: [{name: a, prompt: b, checks: {contain: x}}]",
            "unknown field",
        ),
        ("cases: [{name: a, prompt: \"  \"}]", "prompt is empty"),
        ("cases: [{name: a, prompt: b}]\nextra: 1", "unknown field"),
    ] {
        let error = EvalSuite::parse(text).unwrap_err().to_string();
        assert!(error.contains(says), "{text:?}: {error}");
    }
    let suite =
        EvalSuite::parse("cases: [{name: a, prompt: b, agent: karen, checks: {contains: x}}]").unwrap();
    assert_eq!(suite.threshold, 1.0, "every case must pass by default");
    assert_eq!(suite.cases[0].agent, "karen");
    assert_eq!(suite.cases[0].checks.contains, vec!["x".to_owned()]);
}
