//! The assembled prompt (R-MEM-3..5, SPEC.md §17.3 #7): one `user` message
//! with the sections in their fixed order and literal headers, right before
//! the last three turns; budgets respected; empty sections absent.

use std::collections::BTreeMap;
use std::sync::Arc;

use jarvis_sdk::common::{SequentialIds, char_len};
use jarvis_sdk::memory::{
    InMemoryMemoryStore, MemoryConfig, MemoryScope, MemoryService, SectionBudgets, SectionKind, TurnRecord,
};
use jarvis_sdk::model::{HashEmbedder, Message};

use super::fixed_clock;

fn render(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| match m {
            Message::User(u) => format!("--- user\n{}", u.content),
            Message::Assistant(a) => format!("--- assistant\n{}", a.content),
            Message::Tool(t) => format!("--- tool {}\n{}", t.tool_name, t.content),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn the_memory_message_sits_before_the_last_three_turns() {
    let home = tempfile::tempdir().unwrap();
    let budgets = SectionBudgets {
        key_facts: 120,
        long_term: 160,
        procedures: 400,
        task_patterns: 60,
        working: 150,
        ..SectionBudgets::default()
    };
    let mut config = MemoryConfig::for_home(home.path());
    config.budgets = budgets;
    let service = MemoryService::new(
        Arc::new(InMemoryMemoryStore::new()),
        Arc::new(HashEmbedder::default()),
    )
    .with_clock(fixed_clock())
    .with_ids(Arc::new(SequentialIds::default()))
    .with_config(config);

    let old = MemoryScope::new("u", "main", "s-old");
    let now = MemoryScope::new("u", "main", "s-now");
    service
        .update_user_model(
            &old,
            BTreeMap::from([
                ("name".into(), "김민준".into()),
                ("language".into(), "한국어".into()),
            ]),
        )
        .await
        .unwrap();
    service
        .remember(&old, "서울 SH 행복주택 청약을 준비하고 있다")
        .await
        .unwrap();
    service
        .remember(&old, "청약통장 납입 횟수는 48회다")
        .await
        .unwrap();
    service
        .remember(&old, "고양이 사료는 연어맛만 먹인다")
        .await
        .unwrap();
    for (prompt, answer) in [
        (
            "SH 행복주택 청약 공고를 찾아줘",
            "서울 SH 행복주택 공고 3건을 찾았습니다.\n자세한 내용은…",
        ),
        ("LH 국민임대 청약 공고도 알려줘", "LH 국민임대 공고는 2건입니다."),
        ("제주도 숙소 예약해 줘", "서귀포 펜션으로 예약했습니다."),
    ] {
        service
            .record_turn(&old, TurnRecord::new(prompt, answer))
            .await
            .unwrap();
    }
    // A task pattern far over its section's budget: cut with an ellipsis.
    service
        .remember_task_pattern(
            &now,
            "청약 공고 조회",
            "SH 행복주택 청약 공고는 sh_notice 로 지역과 키워드를 넣어 찾고, 마감일과 자격을 표로 정리한 뒤 신혼부부 특별공급 여부를 따로 확인한다",
        )
        .await
        .unwrap();

    // Five earlier turns of this session, recorded as the harness would.
    let earlier = [
        ("SH 행복주택 마감일이 언제야?", "12월 3일입니다."),
        ("신혼부부 특별공급 자격은?", "혼인 7년 이내입니다."),
        ("SH 행복주택 마감일 다시 알려줘", "12월 3일입니다."),
        ("대출 한도도 계산해 줘", "최대 2억 원입니다."),
        ("고마워", "천만에요."),
    ];
    let mut history = Vec::new();
    for (prompt, answer) in earlier {
        service
            .record_turn(&now, TurnRecord::new(prompt, answer))
            .await
            .unwrap();
        history.push(Message::user(prompt));
        history.push(Message::assistant_text(answer));
    }
    let prompt = "SH 행복주택 청약 마감일 다시 알려줘";
    history.push(Message::user(prompt));

    let context = service.observe(&now, prompt).await.unwrap();
    let messages = context.apply(&history);

    // Placement: the memory message, then exactly the last three turns.
    assert_eq!(messages.len(), 1 + 5);
    assert_eq!(messages[1..], history[history.len() - 5..]);
    let Message::User(memory) = &messages[0] else {
        panic!("the memory message is a user message");
    };
    // Order and headers.
    let kinds: Vec<SectionKind> = context.sections().iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds,
        [
            SectionKind::KeyFacts,
            SectionKind::LongTerm,
            SectionKind::TaskPatterns,
            SectionKind::Working
        ],
        "no procedures were written, so [절차 기억] is absent"
    );
    let mut at = 0;
    for kind in &kinds {
        let found = memory.content[at..].find(kind.header()).expect("header in order");
        at += found + kind.header().len();
    }
    assert!(!memory.content.contains("[절차 기억]"));
    // Budgets: each section's lines fit; the oversized pattern was cut.
    for section in context.sections() {
        let body = section.items.join("\n");
        assert!(
            char_len(&body) <= budgets.of(section.kind),
            "{:?}: {} characters",
            section.kind,
            char_len(&body)
        );
    }
    let patterns = &context.section(SectionKind::TaskPatterns).unwrap().items;
    assert_eq!(patterns.len(), 1);
    assert!(patterns[0].ends_with('…'));
    // The turns still in the window are not recalled as episodes; older ones are.
    let long_term = context.section(SectionKind::LongTerm).unwrap().items.join("\n");
    assert!(!long_term.contains("대출 한도") && !long_term.contains("고마워"));

    insta::assert_snapshot!("assembled_prompt", render(&messages));
}

#[tokio::test]
async fn the_user_model_file_decides_the_user_model_lines() {
    let home = tempfile::tempdir().unwrap();
    let service = MemoryService::new(
        Arc::new(InMemoryMemoryStore::new()),
        Arc::new(HashEmbedder::default()),
    )
    .with_clock(fixed_clock())
    .with_config(MemoryConfig::for_home(home.path()));
    let scope = MemoryScope::new("u", "karen", "s");
    let set = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>()
    };
    service
        .update_user_model(&scope, set(&[("city", "Seoul"), ("pet", "a cat named Nabi")]))
        .await
        .unwrap();
    let facts =
        |c: &jarvis_sdk::memory::MemoryContext| c.section(SectionKind::KeyFacts).map(|s| s.items.clone());
    let before = service.observe(&scope, "what is my cat called").await.unwrap();
    assert_eq!(
        facts(&before),
        Some(vec![
            "- city: Seoul".to_owned(),
            "- pet: a cat named Nabi".to_owned()
        ]),
        "the entries open the section once, though the distilled record matches too"
    );
    // A person (or distillation) removes a key: it is gone from the prompt,
    // although the store still holds what was distilled.
    service
        .update_user_model(&scope, set(&[("pet", "")]))
        .await
        .unwrap();
    let after = service.observe(&scope, "what is my cat called").await.unwrap();
    assert_eq!(facts(&after), Some(vec!["- city: Seoul".to_owned()]));
    // Every agent reads the same file.
    let main = MemoryScope::new("u", "main", "m");
    let other = service.observe(&main, "hello").await.unwrap();
    assert_eq!(facts(&other), Some(vec!["- city: Seoul".to_owned()]));
}
