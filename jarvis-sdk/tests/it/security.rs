//! The input security pipeline: fixed order, every stage always runs, the
//! first rejection decides; every validation, auth and policy rule with a
//! failing input; disguised script patterns; and generated inputs.

use async_trait::async_trait;
use jarvis_sdk::turn::{
    Caller, SecurityError, SecurityInput, SecurityPipeline, SecurityStage, SessionPolicy, TokenAuth,
    Validation, ValidationConfig,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::{Arc, Mutex};

type Log = Arc<Mutex<Vec<String>>>;

struct Logging {
    name: &'static str,
    reject: bool,
    log: Log,
}

#[async_trait]
impl SecurityStage for Logging {
    fn name(&self) -> &str {
        self.name
    }
    async fn check(&self, input: &mut SecurityInput) -> Result<(), SecurityError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}:{}", self.name, input.text));
        input.text.push('+');
        if self.reject {
            Err(SecurityError::Forbidden(format!("{} says no", self.name)))
        } else {
            Ok(())
        }
    }
}

fn logging(rejecting: &[&str]) -> (SecurityPipeline, Log) {
    let log: Log = Arc::default();
    let stage = |name: &'static str| -> Arc<dyn SecurityStage> {
        Arc::new(Logging {
            name,
            reject: rejecting.contains(&name),
            log: log.clone(),
        })
    };
    // Replacing slots in another order changes nothing about the run order.
    let pipeline = SecurityPipeline::default()
        .with_policy(stage("policy"))
        .with_validation(stage("validation"))
        .with_auth(stage("auth"));
    (pipeline, log)
}

#[tokio::test]
async fn stages_run_in_order_each_seeing_the_previous_ones_output() {
    let (pipeline, log) = logging(&[]);
    let out = pipeline
        .run(SecurityInput::local("x", "main", "s"))
        .await
        .unwrap();
    assert_eq!(out.text, "x+++");
    assert_eq!(*log.lock().unwrap(), ["validation:x", "auth:x+", "policy:x++"]);
}

#[tokio::test]
async fn every_stage_runs_even_after_a_rejection_and_the_first_decides() {
    let (pipeline, log) = logging(&["validation", "policy"]);
    let err = pipeline
        .run(SecurityInput::local("x", "main", "s"))
        .await
        .unwrap_err();
    assert_eq!(err, SecurityError::Forbidden("validation says no".into()));
    assert_eq!(log.lock().unwrap().len(), 3, "no stage is skipped");
}

fn validate(text: &str) -> Result<String, SecurityError> {
    Validation::default().validate(text)
}

#[test]
fn empty_and_blank_inputs_are_refused() {
    for text in ["", " ", "\n\t  \r\n"] {
        assert_eq!(validate(text), Err(SecurityError::Empty), "{text:?}");
    }
}

#[test]
fn the_length_limit_is_configurable_and_counts_characters() {
    let v = Validation::new(ValidationConfig { max_chars: 5 });
    assert!(v.validate("가나다라마").is_ok(), "5 characters, 15 bytes");
    assert_eq!(
        v.validate("가나다라마바"),
        Err(SecurityError::TooLong { chars: 6, limit: 5 })
    );
    assert!(validate(&"a".repeat(10_000)).is_ok());
    assert!(matches!(
        validate(&"a".repeat(10_001)),
        Err(SecurityError::TooLong { chars: 10_001, .. })
    ));
    let message = validate(&"a".repeat(10_001)).unwrap_err().to_string();
    assert!(
        message.contains("10001 characters") && message.contains("10000"),
        "{message}"
    );
}

#[test]
fn text_is_nfc_normalised() {
    // "é" as e + combining acute, "한" as three jamo.
    assert_eq!(validate("e\u{301} \u{1112}\u{1161}\u{11AB}").unwrap(), "é 한");
}

#[test]
fn script_patterns_are_refused_also_in_disguise() {
    for text in [
        "<script>alert(1)</script>",
        "<ScRiPt src=//x>",
        "</SCRIPT>",
        "<scr\0ipt>",
        "<scr\u{200b}ipt>",
        "<scr\u{00ad}ipt>",
        "&#x3c;script>",
        "&#60;script&#62;",
        "&lt;script&gt;",
        "&amp;lt;script>",
        "＜script＞",
        "＜ｓｃｒｉｐｔ＞",
        "java\tscript:alert(1)",
        "JaVaScRiPt:alert(1)",
        "java\nscript:alert(1)",
        "javascript&colon;alert(1)",
        "javascript&#58;alert(1)",
        "<a href=\"vbscript:msgbox\">",
        "<svg onload=alert(1)>",
        "<svg/onload=alert(1)>",
        "<img src=x onerror = alert(1)>",
        "<body\nonpageshow=alert(1)>",
        "<div title=\"x\" onclick='go()'>",
        "data:text/html;base64,PHNjcmlwdD4=",
        "DATA:TEXT/HTML,<b>",
        "<iframe src=x>",
        "<object data=x>",
        "<embed src=x>",
    ] {
        let result = validate(text);
        assert!(
            matches!(result, Err(SecurityError::ScriptPattern { .. })),
            "{text:?} passed: {result:?}"
        );
    }
}

#[test]
fn ordinary_text_passes() {
    for text in [
        "a < b",
        "if x<y && y>z then 1 < 2",
        "for (i = 0; i < n; i++) {}",
        "I like javascript and TypeScript",
        "the onload event fires after the page loads",
        "ratio 3:4, time 10:30, see https://example.com/a?b=c&d=e",
        "AT&T and R&D, 5 > 3",
        "서울 SH 청약 공고 <2026년> 찾아 줘",
        "온로드=3, onboard = true",
        "<b>bold</b> is fine, as is <p>text</p>",
        "emoji 😀 and ＜fullwidth＞ brackets",
    ] {
        assert!(
            validate(text).is_ok(),
            "{text:?} was refused: {:?}",
            validate(text)
        );
    }
}

#[test]
fn naming_a_script_tag_with_brackets_is_refused_by_choice() {
    // Documented judgement call: conservative; "the script tag" passes.
    assert!(validate("describe the <script> tag").is_err());
    assert!(validate("describe the script tag").is_ok());
}

fn web(token: Option<&str>) -> SecurityInput {
    SecurityInput {
        caller: Caller::Web {
            token: token.map(str::to_owned),
        },
        ..SecurityInput::local("hi", "main", "s")
    }
}

#[tokio::test]
async fn auth_cases() {
    let open = TokenAuth::default();
    let locked = TokenAuth::new(Some("tok-123".into())).with_agents(["main".to_owned(), "karen".to_owned()]);
    assert!(open.check(&mut web(None)).await.is_ok(), "no token configured");
    assert!(locked.check(&mut web(Some("tok-123"))).await.is_ok());
    for (input, needle) in [
        (web(None), "requires a token"),
        (web(Some("tok-124")), "not valid"),
        (web(Some("")), "not valid"),
    ] {
        let err = locked.check(&mut input.clone()).await.unwrap_err();
        assert!(
            matches!(&err, SecurityError::Unauthenticated(m) if m.contains(needle)),
            "{err}"
        );
    }
    let mut local = SecurityInput::local("hi", "main", "s");
    assert!(locked.check(&mut local).await.is_ok());
    let mut system = SecurityInput {
        caller: Caller::System {
            name: "scheduler".into(),
        },
        ..local.clone()
    };
    assert!(locked.check(&mut system).await.is_ok());
    let mut peer = SecurityInput {
        caller: Caller::Peer {
            agent_id: "karen".into(),
        },
        ..local.clone()
    };
    assert!(locked.check(&mut peer).await.is_ok());
    let mut stranger = SecurityInput {
        caller: Caller::Peer {
            agent_id: "mallory".into(),
        },
        ..local
    };
    assert!(matches!(
        locked.check(&mut stranger).await,
        Err(SecurityError::Unauthenticated(_))
    ));
    assert!(
        !format!("{locked:?}").contains("tok-123"),
        "the token never prints"
    );
    assert!(!format!("{:?}", web(Some("tok-123")).caller).contains("tok-123"));
}

#[tokio::test]
async fn policy_keeps_peer_sessions_read_only_for_people() {
    let peer_session = |caller| SecurityInput {
        caller,
        peer_session: true,
        ..SecurityInput::local("hi", "karen", "peer-main-karen")
    };
    let err = SessionPolicy
        .check(&mut peer_session(Caller::Local))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("peer-main-karen"), "{err}");
    assert!(
        SessionPolicy
            .check(&mut peer_session(Caller::Web { token: None }))
            .await
            .is_err()
    );
    assert!(
        SessionPolicy
            .check(&mut peer_session(Caller::Peer {
                agent_id: "main".into()
            }))
            .await
            .is_ok()
    );
    assert!(
        SessionPolicy
            .check(&mut SecurityInput::local("hi", "main", "s"))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn the_default_pipeline_refuses_with_the_first_reason() {
    let pipeline = SecurityPipeline::default().with_auth(Arc::new(TokenAuth::new(Some("t".into()))));
    let input = SecurityInput {
        peer_session: true,
        ..web(None)
    };
    let mut script = input.clone();
    script.text = "<script>".into();
    assert!(matches!(
        pipeline.run(script).await,
        Err(SecurityError::ScriptPattern { .. })
    ));
    assert!(matches!(
        pipeline.run(input).await,
        Err(SecurityError::Unauthenticated(_))
    ));
}

/// Small inputs: random Unicode, combining marks, controls, near-misses.
fn small_input() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        any::<char>().prop_map(String::from),
        "[\u{300}-\u{36f}\u{1100}-\u{11ff}\u{200b}-\u{200f}\u{0}-\u{1f}]{1,3}",
        Just("<".to_owned()),
        Just("&#".to_owned()),
        Just("script".to_owned()),
        Just("java".to_owned()),
        Just(":".to_owned()),
        Just(" on".to_owned()),
        Just("=".to_owned()),
        Just("＜".to_owned()),
        Just("&lt".to_owned()),
        Just("가".to_owned()),
    ];
    prop::collection::vec(pieces, 0..24).prop_map(|v| v.concat())
}

#[test]
fn a_hundred_thousand_generated_inputs_never_panic_and_nfc_is_idempotent() {
    let validation = Validation::new(ValidationConfig { max_chars: 40 });
    let mut runner = TestRunner::new(Config {
        cases: 100_000,
        failure_persistence: None,
        ..Config::default()
    });
    let outcomes = std::cell::RefCell::new([0usize; 3]);
    runner
        .run(&small_input(), |text| {
            match validation.validate(&text) {
                Ok(out) => {
                    outcomes.borrow_mut()[0] += 1;
                    let again = validation.validate(&out);
                    prop_assert_eq!(again.as_ref(), Ok(&out), "NFC output is a fixed point");
                    prop_assert!(out.chars().count() <= 40);
                }
                Err(SecurityError::ScriptPattern { .. }) => outcomes.borrow_mut()[1] += 1,
                Err(_) => outcomes.borrow_mut()[2] += 1,
            }
            Ok(())
        })
        .unwrap();
    let outcomes = outcomes.into_inner();
    assert!(
        outcomes.iter().all(|n| *n > 100),
        "every outcome was generated: {outcomes:?}"
    );
}

#[test]
fn fifty_one_megabyte_inputs_are_refused_quickly_without_panicking() {
    let validation = Validation::default();
    let unlimited = Validation::new(ValidationConfig {
        max_chars: usize::MAX / 8,
    });
    let seeds = [
        "가",
        "a",
        "<",
        "&#x3c;",
        "e\u{301}",
        "\u{200b}",
        "＜",
        "😀",
        "\0",
        "java\tscript:",
    ];
    for i in 0..50 {
        let unit = seeds[i % seeds.len()];
        let text = unit.repeat((1 << 20) / unit.len());
        assert!(matches!(
            validation.validate(&text),
            Err(SecurityError::TooLong { .. })
        ));
        // With no practical limit the whole pipeline (NFC, skeleton, patterns) runs on 1 MB.
        if i < seeds.len() {
            let _ = unlimited.validate(&text);
        }
    }
}
