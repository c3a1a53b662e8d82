//! Memory through the real binary, over months: every turn is its own
//! `jarvis ask` (a process start and stop), at a time set by
//! `JARVIS_CLOCK__START`, and what recall put before the model is read
//! from the faux provider's request log.

use serde_json::Value;
use std::path::Path;

use super::{TempHome, scripted, text};

const SCRIPT: &str = "fallback: { text: \"알겠습니다. Noted.\" }";

/// One turn in a new session at `at` (RFC 3339); answers the memory
/// message the model was sent (the `user` message starting with a section
/// header), or `""` when there was none. (`_when` only tells a reader which
/// stretch of the person's life the turn belongs to.)
fn ask(home: &TempHome, _when: &str, at: &str, prompt: &str) -> String {
    ask_with(home, &[], at, prompt)
}

/// [`ask`] with more environment variables.
pub(super) fn ask_with(home: &TempHome, env: &[(&str, String)], at: &str, prompt: &str) -> String {
    let requests = home.0.join(format!("requests-{}.jsonl", at.replace(':', "")));
    let mut cmd = scripted(home, SCRIPT);
    cmd.env("JARVIS_CLOCK__START", at)
        .env("JARVIS_TIME__ZONE", "Asia/Seoul")
        .env("JARVIS_FAUX__REQUEST_LOG", &requests);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let out = cmd.args(["ask", "--new", prompt]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    memory_message(&requests)
}

fn memory_message(requests: &Path) -> String {
    let log = std::fs::read_to_string(requests).unwrap();
    let first: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.starts_with('['))
        .unwrap_or("")
        .to_owned()
}

/// The `[장기 기억]` section of a memory message.
pub(super) fn long_term(message: &str) -> &str {
    let Some(start) = message.find("[장기 기억]") else {
        return "";
    };
    let rest = &message[start..];
    let end = rest[1..].find("\n[").map_or(rest.len(), |e| e + 1);
    &rest[..end]
}

/// A life of a few months: facts, small talk, a fact corrected later, in
/// several sessions, in English and Korean.
fn months_of_life(home: &TempHome) {
    let turns = [
        (
            "s-jan",
            "2026-01-10T09:00:00+09:00",
            "My sister Mina just moved to Busan for a job at the aquarium.",
        ),
        (
            "s-jan",
            "2026-01-10T09:05:00+09:00",
            "Can you suggest a quick pasta recipe for tonight?",
        ),
        (
            "s-feb",
            "2026-02-14T20:00:00+09:00",
            "The wedding venue is booked: Holly Bank Barn, for 90 guests.",
        ),
        (
            "s-feb",
            "2026-02-14T20:04:00+09:00",
            "Remind me to water the basil on the balcony.",
        ),
        (
            "s-mar",
            "2026-03-03T18:30:00+09:00",
            "I got my flu shot at the clinic near the office today.",
        ),
        (
            "s-mar",
            "2026-03-03T18:34:00+09:00",
            "서연이는 매주 화요일 저녁에 첼로 레슨을 받아.",
        ),
        (
            "s-apr",
            "2026-04-21T19:10:00+09:00",
            "Change of plan: we moved the wedding venue to The Granary at Esholt.",
        ),
        (
            "s-apr",
            "2026-04-21T19:15:00+09:00",
            "What's a good podcast about space?",
        ),
        (
            "s-may",
            "2026-05-02T08:00:00+09:00",
            "주말에 부모님 댁에 가서 김치 담그기로 했어.",
        ),
    ];
    for (session, at, prompt) in turns {
        ask(home, session, at, prompt);
    }
}

#[test]
fn months_later_a_fact_is_found_by_another_wording_in_another_session_with_its_date() {
    let home = TempHome::new();
    months_of_life(&home);

    // Months later, after many restarts, in a new session, worded otherwise.
    let message = ask(
        &home,
        "s-jul",
        "2026-07-15T10:00:00+09:00",
        "Which city does Mina live in these days?",
    );
    let section = long_term(&message);
    assert!(
        section.contains("[2026-01-10]") && section.contains("Mina just moved to Busan"),
        "the fact, dated, reached the model: {message}"
    );

    // "When did I …": the dated episode, the date in the request.
    let message = ask(
        &home,
        "s-jul",
        "2026-07-15T10:10:00+09:00",
        "When did I get my flu shot?",
    );
    let section = long_term(&message);
    let line = section
        .lines()
        .find(|l| l.contains("flu shot at the clinic"))
        .unwrap_or_else(|| panic!("the flu shot was recalled: {message}"));
    assert!(line.contains("[2026-03-03]"), "{line}");
}

#[test]
fn a_corrected_fact_ranks_the_correction_first() {
    let home = TempHome::new();
    months_of_life(&home);
    let message = ask(
        &home,
        "s-jun",
        "2026-06-01T12:00:00+09:00",
        "Where is the wedding venue now?",
    );
    let section = long_term(&message);
    let new = section.find("The Granary at Esholt");
    let old = section.find("Holly Bank Barn");
    assert!(new.is_some(), "the correction was recalled: {message}");
    assert!(
        old.is_none_or(|old| new.unwrap() < old),
        "the correction comes before what it corrected: {section}"
    );
}

#[test]
fn korean_and_english_questions_find_korean_and_english_memories_and_periods() {
    let home = TempHome::new();
    months_of_life(&home);
    let message = ask(
        &home,
        "s-jun",
        "2026-06-02T09:00:00+09:00",
        "서연이 첼로 레슨이 무슨 요일이었지?",
    );
    assert!(
        long_term(&message).contains("[2026-03-03] 서연이는 매주 화요일 저녁에 첼로 레슨"),
        "{message}"
    );
    let message = ask(
        &home,
        "s-jun",
        "2026-06-02T09:10:00+09:00",
        "Did I ask you about the basil?",
    );
    assert!(
        long_term(&message).contains("[2026-02-14] Remind me to water the basil"),
        "{message}"
    );
    // A period: what happened last month (May) comes first, though no
    // word of the question is in it.
    let message = ask(
        &home,
        "s-jun",
        "2026-06-02T09:20:00+09:00",
        "지난달에 뭐 하기로 했었지?",
    );
    let section = long_term(&message);
    let first = section.lines().nth(1).unwrap_or("");
    assert!(
        first.contains("[2026-05-02]") && first.contains("김치"),
        "{section}"
    );
}
