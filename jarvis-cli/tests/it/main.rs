//! The `jarvis` binary, run as a user runs it.

use std::process::Command;

fn jarvis() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jarvis"));
    for var in [
        "JARVIS_LLM__PROVIDER",
        "JARVIS_LLM__MODEL",
        "JARVIS_LLM__BASE_URL",
        "JARVIS_LLM__API_KEY",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "JARVIS_FAUX__SCRIPT",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

#[test]
fn ask_streams_the_answer_of_a_faux_script() {
    let dir = std::env::temp_dir().join(format!("jarvis-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("script.yaml");
    std::fs::write(
        &script,
        "replies: [ { text: \"안녕하세요, 주인님.\", chunks: 4 } ]\n",
    )
    .unwrap();
    let out = jarvis()
        .args(["ask", "안녕"])
        .env("JARVIS_LLM__PROVIDER", "faux")
        .env("JARVIS_FAUX__SCRIPT", &script)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "안녕하세요, 주인님.");
}

#[test]
fn without_a_model_it_plays_the_demo_and_says_so() {
    let out = jarvis().args(["ask", "hello"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("offline demo"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Offline demo"));
}

#[test]
fn a_bad_script_or_provider_is_a_clear_error() {
    let out = jarvis()
        .args(["ask", "x"])
        .env("JARVIS_LLM__PROVIDER", "faux")
        .env("JARVIS_FAUX__SCRIPT", "/nonexistent/script.yaml")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read faux script"));
    let out = jarvis()
        .args(["ask", "x"])
        .env("JARVIS_LLM__PROVIDER", "gpt9")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("gpt9"));
}
