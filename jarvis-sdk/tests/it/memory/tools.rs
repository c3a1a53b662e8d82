//! `remember_task_pattern` and `recall_episodes` through a loop turn, in the
//! calling agent's scope; bad arguments are `is_error` results.

use std::sync::Arc;

use jarvis_sdk::CancellationToken;
use jarvis_sdk::agent::{
    AgentIdentity, Harness, LoopContext, MemorySessionStore, NewSession, SessionStore, ToolContext,
    ToolRegistry,
};
use jarvis_sdk::common::SequentialIds;
use jarvis_sdk::memory::{
    Agents, InMemoryMemoryStore, Layer, MemoryFilter, MemoryRead, MemoryScope, MemoryService, MemoryStore,
    SectionKind, StaticScopes, TurnRecord,
};
use jarvis_sdk::model::{FauxProvider, HashEmbedder, Message};
use jarvis_sdk::turn::{RECALL_EPISODES_TOOL, REMEMBER_TASK_PATTERN_TOOL, register_memory_tools};
use serde_json::json;

use super::fixed_clock;
use crate::sessions_contract::id;

fn service() -> (Arc<MemoryService>, Arc<InMemoryMemoryStore>) {
    let store = Arc::new(InMemoryMemoryStore::new());
    let service = MemoryService::new(store.clone(), Arc::new(HashEmbedder::default()))
        .with_clock(fixed_clock())
        .with_ids(Arc::new(SequentialIds::default()));
    (Arc::new(service), store)
}

fn tool_results(messages: &[Message]) -> Vec<(String, String, bool)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some((t.tool_name.clone(), t.content.clone(), t.is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn the_memory_tools_work_through_a_turn_in_the_agents_scope() {
    let (service, store) = service();
    let scopes = Arc::new(StaticScopes::new("u").with_read("karen", MemoryRead::own_only()));
    // Something to recall: an earlier turn of another session of karen's,
    // and one of main's that karen must not see.
    service
        .record_turn(
            &MemoryScope::new("u", "karen", "older"),
            TurnRecord::new(
                "find the newest SH housing notice in Seoul",
                "found SH notice 2026-118",
            ),
        )
        .await
        .unwrap();
    service
        .record_turn(
            &MemoryScope::new("u", "main", "default-main"),
            TurnRecord::new("the SH housing notice main looked at", "secret of main"),
        )
        .await
        .unwrap();

    let script = r#"
replies:
  - tool_calls:
      - { name: remember_task_pattern, arguments: { name: notice-lookup, pattern: "call sh_notice with the region, then read the newest" } }
      - { name: recall_episodes, arguments: { query: "SH housing notice" } }
  - tool_calls:
      - { name: remember_task_pattern, arguments: { name: "../escape", pattern: x } }
      - { name: recall_episodes, arguments: { query: "  " } }
  - text: "done"
"#;
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let mut tools = ToolRegistry::new();
    register_memory_tools(&mut tools, service.clone(), scopes).unwrap();
    assert_eq!(
        tools.names().collect::<Vec<_>>(),
        [RECALL_EPISODES_TOOL, REMEMBER_TASK_PATTERN_TOOL]
    );
    assert!(tools.names().all(|n| !tools.get(n).unwrap().requires_approval()));
    let ctx = LoopContext::new(faux.clone())
        .with_tools(tools)
        .with_identity(AgentIdentity {
            agent_id: "karen".into(),
            agent_name: "K.A.R.E.N.".into(),
            session_id: "unset".into(),
        });
    let sessions = Arc::new(MemorySessionStore::new());
    sessions
        .create(NewSession::user(id("default-karen"), "karen"))
        .await
        .unwrap();
    let harness = Harness::new(sessions, ctx).with_memory(service.clone(), "u", MemoryRead::own_only());
    let outcome = harness
        .run_turn(
            &id("default-karen"),
            "look up a notice",
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.final_message.content, "done");

    let results = tool_results(&outcome.new_messages);
    assert_eq!(results.len(), 4);
    assert_eq!(
        results[0],
        (
            REMEMBER_TASK_PATTERN_TOOL.into(),
            "Remembered the task pattern \"notice-lookup\".".into(),
            false
        )
    );
    let (name, recalled, is_error) = &results[1];
    assert_eq!((name.as_str(), *is_error), (RECALL_EPISODES_TOOL, false));
    assert!(recalled.starts_with("Episodes matching \"SH housing notice\", best first:\n1. [2026-11-29] find the newest SH housing notice"), "{recalled}");
    assert!(
        !recalled.contains("secret of main"),
        "karen reads only its own episodes: {recalled}"
    );
    assert!(
        results[2].2 && results[2].1.contains("invalid task pattern name"),
        "{:?}",
        results[2]
    );
    assert!(
        results[3].2 && results[3].1.contains("query is empty"),
        "{:?}",
        results[3]
    );

    // The pattern is karen's, procedural; main does not see it; karen's
    // next turn gets it in [작업 패턴].
    let patterns = store
        .list(&MemoryFilter::for_user("u").layer(Layer::Procedural, Agents::Any))
        .await
        .unwrap();
    assert_eq!(patterns.len(), 1);
    assert_eq!(
        (patterns[0].agent_id.as_str(), patterns[0].kind.as_str()),
        ("karen", "task_pattern")
    );
    let karen = MemoryScope::new("u", "karen", "default-karen");
    let context = service
        .observe(&karen, "look up a notice with sh_notice")
        .await
        .unwrap();
    let section = context
        .section(SectionKind::TaskPatterns)
        .expect("the pattern is recalled");
    assert_eq!(
        section.items,
        ["- notice-lookup: call sh_notice with the region, then read the newest"]
    );
    let main = MemoryScope::new("u", "main", "default-main");
    let context = service
        .observe(&main, "look up a notice with sh_notice")
        .await
        .unwrap();
    assert!(context.section(SectionKind::TaskPatterns).is_none());
}

#[tokio::test]
async fn remembering_a_pattern_again_replaces_it() {
    let (service, store) = service();
    let scopes = Arc::new(StaticScopes::new("u"));
    let mut tools = ToolRegistry::new();
    register_memory_tools(&mut tools, service, scopes).unwrap();
    let tool = tools.get(REMEMBER_TASK_PATTERN_TOOL).unwrap();
    let ctx = ToolContext::new("default-main", "main");
    for pattern in ["first way", "second way", "second way"] {
        let result = tool
            .call(json!({"name": "report", "pattern": pattern}), &ctx)
            .await
            .unwrap();
        assert!(!result.is_error, "{result:?}");
    }
    let all = store.list(&MemoryFilter::for_user("u")).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].text, "report: second way");
    let bad = tool.call(json!({"name": "report"}), &ctx).await.unwrap_err();
    assert!(bad.to_string().contains("missing field `pattern`"), "{bad}");
}
