//! Cassettes through the binary: `jarvis ask` with `JARVIS_RECORD__ENABLED`
//! against an OpenAI-compatible server records the session without its API
//! key; `jarvis replay` runs it again (exit 0), reports an edited recording
//! (exit 1) and refuses what is not a cassette (exit 2); `jarvis eval
//! --cassette` answers the suite's cases from the recording.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{TempHome, http_server, jarvis, text};

const KEY: &str = "sk-fake-cassette-key-0123456789";

/// An OpenAI chat-completions stream answering `네, 주인님.` (format of
/// <https://platform.openai.com/docs/api-reference/chat/streaming>).
const ANSWER: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",",
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"네, 주인님.\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",",
    "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",",
    "\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":4,\"total_tokens\":16}}\n\n",
    "data: [DONE]\n\n",
);

/// `jarvis` talking to the fake OpenAI server at `url` with [`KEY`].
fn openai(home: &TempHome, url: &str) -> std::process::Command {
    let mut cmd = jarvis(&home.0);
    cmd.env("JARVIS_LLM__PROVIDER", "openai")
        .env("JARVIS_LLM__BASE_URL", format!("{url}/v1"))
        .env("JARVIS_LLM__API_KEY", KEY)
        .env("JARVIS_THINKING__ENABLED", "0")
        .env("JARVIS_AGENDA__MODEL_JUDGE", "0");
    cmd
}

#[test]
fn a_recorded_session_holds_no_key_and_replays_the_same() {
    let home = TempHome::new();
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let url = http_server(move |_, _| {
        counted.fetch_add(1, Ordering::SeqCst);
        ("text/event-stream", ANSWER.to_owned())
    });
    for prompt in ["오늘 일정 알려 줘", format!("내 키는 {KEY} 이야").as_str()] {
        let out = openai(&home, &url)
            .env("JARVIS_RECORD__ENABLED", "1")
            .args(["ask", prompt])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout).trim(), "네, 주인님.");
    }
    let dir = home.0.join("cassettes");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let cassette = std::fs::read_to_string(&files[0]).unwrap();
    assert_eq!(cassette.lines().count(), 2, "{cassette}");
    assert!(!cassette.contains(KEY), "the key is never written: {cassette}");
    assert!(
        cassette.contains("[REDACTED]"),
        "the key typed in a prompt is blanked"
    );
    assert!(cassette.contains("오늘 일정 알려 줘"));
    let session = files[0].file_stem().unwrap().to_str().unwrap().to_owned();

    // Replayed with the same configuration, the server is not asked again:
    // the cassette answers.
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    let out = openai(&home, &url).args(["replay", &session]).output().unwrap();
    exits(&out, 0);
    let report = text(&out.stdout);
    assert!(report.contains("turn 1 \"오늘 일정 알려 줘\": same"), "{report}");
    assert!(report.contains("same: 2 turns"), "{report}");
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "a replay against the cassette calls no model"
    );

    // Another model configured since: every request differs at its model.
    let out = openai(&home, &url)
        .env("JARVIS_LLM__MODEL", "gpt-5-mini")
        .args(["replay", &session])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("request.model"),
        "{}",
        text(&out.stdout)
    );

    // A recording whose first request had another system prompt differs at turn 1.
    let mut lines: Vec<serde_json::Value> = cassette
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines[0]["request"]["system"] = "an older system prompt".into();
    let edited = home.0.join("edited.jsonl");
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&edited, body).unwrap();
    let out = openai(&home, &url)
        .args(["replay", edited.to_str().unwrap(), "--against", "current"])
        .output()
        .unwrap();
    exits(&out, 1);
    let report = text(&out.stdout);
    assert!(
        report.contains("turn 1 \"오늘 일정 알려 줘\": DIFFERS at call 1"),
        "{report}"
    );
    assert!(report.contains("request.system"), "{report}");
    assert!(
        report.contains("- recorded: \"an older system prompt\""),
        "{report}"
    );
    assert!(report.contains("turn 2"), "{report}");

    // Against a cassette, an eval answers from the recorded turn with the same prompt.
    let suite = home.0.join("suite.yaml");
    std::fs::write(
        &suite,
        "threshold: 0.5\ncases:\n  - { name: recorded, prompt: 오늘 일정 알려 줘, checks: { contains: 주인님, max_steps: 1 } }\n  - { name: unseen, prompt: 처음 듣는 말, checks: { contains: 네 } }\n",
    )
    .unwrap();
    let eval = |threshold: &str| {
        openai(&home, &url)
            .args([
                "eval",
                suite.to_str().unwrap(),
                "--cassette",
                &session,
                "--threshold",
                threshold,
            ])
            .output()
            .unwrap()
    };
    let out = eval("0.5");
    exits(&out, 0);
    let table = text(&out.stdout);
    assert!(table.contains("recorded"), "{table}");
    assert!(table.contains("no turn of main with this prompt"), "{table}");
    assert!(table.contains("50%") || table.contains("0.5"), "{table}");
    assert_eq!(eval("0.9").status.code(), Some(1));
    assert_eq!(asked.load(Ordering::SeqCst), 2, "nor does an eval against it");
}

/// Asserts `out` ended with `code`, showing what it printed otherwise.
#[track_caller]
fn exits(out: &std::process::Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn replay_refuses_what_is_not_a_cassette() {
    let home = TempHome::new();
    let out = jarvis(&home.0).args(["replay", "s-none"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("s-none.jsonl"),
        "{}",
        text(&out.stderr)
    );
    let bad = home.0.join("bad.jsonl");
    std::fs::write(&bad, "{\"v\":1,\"type\":\"model\",\"turn\":1}\n").unwrap();
    let out = jarvis(&home.0)
        .args(["replay", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("line 1"), "{}", text(&out.stderr));
    let out = jarvis(&home.0)
        .args(["replay", bad.to_str().unwrap(), "--against", "tomorrow"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap refuses an unknown --against");
}
