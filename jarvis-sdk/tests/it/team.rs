//! The agent team: definition files and their rules (SPEC.md §11.2), the
//! registry, the assembled app, and `ask_agent` delegation (§12) end to end
//! on FauxProvider.

use jarvis_pack_housing::{HOUSING_TOOLS, HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::{ApprovalDecision, ApprovalRequest, SessionId, SessionKind, StopReason, UIAdapter};
use jarvis_sdk::app::{
    AgentProfile, AppAssembly, AppConfig, MAIN_AGENT, TeamContext, build_app, parse_definition,
};
use jarvis_sdk::model::{ChatRequest, FauxProvider, Message};
use jarvis_sdk::testing::RecordingAdapter;
use jarvis_sdk::turn::{Caller, PEER_REQUEST_RULE};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

struct TempHome(PathBuf);

impl TempHome {
    fn new() -> Self {
        TempHome(tempfile::tempdir().unwrap().keep())
    }
    fn team(&self, name: &str, yaml: &str) {
        let dir = self.0.join("team");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), yaml).unwrap();
    }
}

impl Drop for TempHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn app(home: &TempHome, script: &str) -> (AppAssembly, Arc<FauxProvider>) {
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let mut config = AppConfig::for_home(&home.0).with_provider(faux.clone());
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    (build_app(config).await.unwrap(), faux)
}

fn main_profile() -> AgentProfile {
    jarvis_sdk::app::AgentProfile {
        id: MAIN_AGENT.into(),
        name: "J.A.R.V.I.S.".into(),
        description: "팀 총괄".into(),
        quote: "Just A Rather Very Intelligent System".into(),
        palette: jarvis_sdk::app::Palette {
            primary: "#5fc8e2".into(),
            accent: "#ffd166".into(),
        },
        system_prompt: "You are JARVIS.".into(),
        model: "gpt-4o-mini".into(),
        max_tokens: None,
        temperature: None,
        tools: vec![],
        mcp_tools: None,
        mcp_servers: Vec::new(),
        proactive: true,
        memory_read: Default::default(),
        boundaries: Default::default(),
        sandbox: Default::default(),
        thinking: Default::default(),
        feedback: Arc::new(jarvis_sdk::initiative::CountingFeedback::default()),
        subagents: Vec::new(),
        budget: Default::default(),
    }
}

fn parse(id: &str, yaml: &str) -> Result<AgentProfile, String> {
    let main = main_profile();
    let app_tools: BTreeSet<String> = [
        "read_file",
        "write_file",
        "sh_notice",
        "lh_notice",
        "ask_agent",
        "recall_episodes",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let agent_only: BTreeSet<String> = ["sh_notice", "lh_notice"].into_iter().map(String::from).collect();
    let unconfigured: BTreeSet<String> = ["web_search".to_owned()].into();
    parse_definition(
        id,
        yaml,
        &TeamContext {
            main: &main,
            app_tools: &app_tools,
            agent_only: &agent_only,
            env: &|name| (name == "TEAM_TEST_TOKEN").then(|| "t0ken".to_owned()),
            unconfigured: &unconfigured,
            budget: Default::default(),
        },
    )
}

#[test]
fn definition_rules_each_with_its_failing_case() {
    // Bad ids.
    for id in ["Karen", "9lives", "a.b", "", &"a".repeat(33)] {
        assert!(
            parse(id, "name: X").unwrap_err().contains("not a valid agent id"),
            "{id}"
        );
    }
    assert!(parse(&"a".repeat(32), "").is_ok());
    // main.yaml is not an agent definition (it is read for JARVIS's keys).
    assert!(
        parse("main", "name: NOT JARVIS")
            .unwrap_err()
            .contains("main.yaml is not an agent definition")
    );
    // Broken YAML, unknown keys, unknown memory.read keys, bad values.
    assert!(
        parse("x", "name: [unclosed")
            .unwrap_err()
            .contains("invalid definition")
    );
    assert!(
        parse("x", "name: X\ncolour: red")
            .unwrap_err()
            .contains("unknown field `colour`")
    );
    assert!(
        parse("x", "memory:\n  read: { edm: [self], sdm: [main] }")
            .unwrap_err()
            .contains("unknown field `sdm`")
    );
    assert!(
        parse("x", "palette: { primary: red }")
            .unwrap_err()
            .contains("#rrggbb")
    );
    assert!(
        parse("x", "memory: { read: { edm: [\"../etc\"] } }")
            .unwrap_err()
            .contains("not an agent id")
    );
    // Inheritance: empty fields take JARVIS's settings.
    let empty = parse("bob", "model: null\nquote: ''\ntools: []\n").unwrap();
    assert_eq!(empty.name, "B.O.B.");
    assert_eq!(
        (empty.quote.as_str(), empty.model.as_str()),
        ("Just A Rather Very Intelligent System", "gpt-4o-mini")
    );
    assert_eq!(
        (empty.palette.primary.as_str(), empty.system_prompt.as_str()),
        ("#5fc8e2", "You are JARVIS.")
    );
    assert!(empty.proactive);
    // Agent-only tools: only where listed; unknown tools dropped; the always-attached ones added.
    assert!(!empty.has_tool("sh_notice") && empty.has_tool("read_file") && empty.has_tool("ask_agent"));
    let listed = parse(
        "kim",
        "tools: [sh_notice, web_search, read_file]\nproactive: false\nmodel: small",
    )
    .unwrap();
    assert_eq!(
        listed.tools,
        ["sh_notice", "read_file", "ask_agent", "recall_episodes"]
    );
    assert!(!listed.proactive);
    assert_eq!(listed.model, "small", "model overrides the name only");
    // The shipped KAREN parses, lists the housing tools and is proactive.
    let karen_yaml = KAREN_DEFINITION;
    let karen = parse("karen", karen_yaml).unwrap();
    assert!(karen.proactive && karen.has_tool("sh_notice") && karen.has_tool("lh_notice"));
    assert_eq!(karen.palette.primary, "#97BC62");
    assert_eq!(karen.memory_read.edm, ["self"]);
}

#[test]
fn a_definitions_sandbox_is_strict_absolute_and_not_inherited() {
    let widened = parse(
        "net",
        "sandbox:\n  network: true\n  read: [/opt/data]\n  write: [/srv/out]\n",
    )
    .unwrap();
    assert_eq!(
        widened.sandbox,
        jarvis_sdk::turn::SandboxSettings::new()
            .with_network(true)
            .with_read("/opt/data")
            .with_write("/srv/out")
    );
    // Absent: nothing beyond the sandbox, whatever JARVIS has.
    assert_eq!(parse("plain", "").unwrap().sandbox, Default::default());
    for (yaml, reason) in [
        ("sandbox: { net: true }", "unknown field `net`"),
        ("sandbox: { network: maybe }", "invalid definition"),
        ("sandbox: { read: [data] }", "not an absolute path"),
        ("sandbox: { write: [\"/srv/../etc\"] }", "`..`"),
        ("sandbox: { read: /opt }", "invalid definition"),
    ] {
        let error = parse("bad", yaml).unwrap_err();
        assert!(error.contains(reason), "{yaml}: {error}");
    }
}

#[test]
fn jarvis_sandbox_settings_come_from_the_environment() {
    let lookup = |vars: &'static [(&'static str, &'static str)]| {
        AppConfig::from_lookup(move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    };
    let config = lookup(&[
        ("JARVIS_HOME", "/tmp/jarvis-env-test"),
        ("JARVIS_SANDBOX__NETWORK", "1"),
        ("JARVIS_SANDBOX__READ", "/opt/a:/opt/b"),
        ("JARVIS_SANDBOX__WRITE", "/srv/out"),
        ("JARVIS_SANDBOX__REQUIRE", "1"),
    ])
    .unwrap();
    assert_eq!(
        config.sandbox,
        jarvis_sdk::turn::SandboxSettings::new()
            .with_network(true)
            .with_read("/opt/a")
            .with_read("/opt/b")
            .with_write("/srv/out")
    );
    assert!(config.require_sandbox);
    let default = lookup(&[("JARVIS_HOME", "/tmp/jarvis-env-test")]).unwrap();
    assert_eq!(default.sandbox, Default::default());
    assert!(!default.require_sandbox);
    for bad in [
        &[
            ("JARVIS_HOME", "/tmp/j"),
            ("JARVIS_SANDBOX__READ", "relative/dir"),
        ][..],
        &[("JARVIS_HOME", "/tmp/j"), ("JARVIS_SANDBOX__NETWORK", "maybe")][..],
        &[("JARVIS_HOME", "/tmp/j"), ("JARVIS_SANDBOX__REQUIRE", "sure")][..],
    ] {
        let error = lookup(bad).unwrap_err().to_string();
        assert!(error.contains("JARVIS_SANDBOX__"), "{error}");
    }
}

#[tokio::test]
async fn the_app_loads_the_team_skipping_bad_files_in_a_fixed_order() {
    let home = TempHome::new();
    home.team("main.yaml", "name: IMPOSTOR\n");
    home.team("zed.yaml", "name: Z.E.D.\ndescription: last by name\n");
    home.team("karen.yaml", KAREN_DEFINITION);
    home.team("broken.yaml", "tools: [oops\n");
    home.team("Upper.yaml", "name: X\n");
    home.team("notes.txt", "not a definition");
    let (app, _) = app(&home, "fallback: { text: ok }").await;
    let ids: Vec<&str> = app.registry().ids().collect();
    assert_eq!(ids, ["main", "karen", "zed"], "main first, then by file name");
    let skipped: Vec<String> = app
        .registry()
        .skipped()
        .iter()
        .map(|s| s.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        skipped,
        ["Upper.yaml", "broken.yaml"],
        "main.yaml is JARVIS's own: its unread keys are ignored, the file is not skipped"
    );
    let main = app.registry().main();
    assert_eq!(main.name, "J.A.R.V.I.S.");
    let agent_only: Vec<&str> = HOUSING_TOOLS.iter().copied().chain(["web_fetch"]).collect();
    for tool in agent_only {
        assert!(!main.has_tool(tool), "JARVIS does not see {tool}");
    }
    assert!(main.has_tool("ask_agent") && main.has_tool("run_command"));
    let roster = app.registry().roster();
    assert!(roster[0].description.contains("팀 총괄"));
    assert!(
        app.tools()
            .get("ask_agent")
            .unwrap()
            .description()
            .contains("karen (K.A.R.E.N.)")
    );
}

#[tokio::test]
async fn a_new_home_is_seeded_with_the_built_in_team_and_files_are_never_overwritten() {
    let home = TempHome::new();
    let (app, _) = app(&home, "fallback: { text: ok }").await;
    assert_eq!(app.registry().ids().collect::<Vec<_>>(), ["main", "karen"]);
    assert_eq!(
        std::fs::read_to_string(home.0.join("team/karen.yaml")).unwrap(),
        KAREN_DEFINITION
    );
    drop(app);
    // An existing team directory is left as it is, even without KAREN.
    let other = TempHome::new();
    other.team("bob.yaml", "name: B.O.B.\n");
    let (app, _) = self::app(&other, "fallback: { text: ok }").await;
    assert_eq!(app.registry().ids().collect::<Vec<_>>(), ["main", "bob"]);
    assert!(!other.0.join("team/karen.yaml").exists());
}

#[tokio::test]
async fn alone_jarvis_has_no_ask_agent() {
    let home = TempHome::new();
    std::fs::create_dir_all(home.0.join("team")).unwrap();
    let (app, _) = app(&home, "fallback: { text: ok }").await;
    assert_eq!(app.registry().ids().collect::<Vec<_>>(), ["main"]);
    assert!(!app.registry().main().has_tool("ask_agent"));
    assert!(app.tools().get("ask_agent").is_none());
}

#[tokio::test]
async fn sessions_keep_their_agent_and_unknown_agents_are_refused() {
    let home = TempHome::new();
    let (app, _) = app(&home, "fallback: { text: ok }").await;
    let karen = app.create_session(Some("karen")).await.unwrap();
    assert_eq!(karen.agent_id, "karen");
    assert!(
        app.create_session(Some("nobody"))
            .await
            .unwrap_err()
            .is_not_found()
    );
    // An existing session opens with its own agent; the requested one is ignored.
    let opened = app.open_or_create(&karen.id, Some("main")).await.unwrap();
    assert_eq!(opened.agent_id(), "karen");
    // An unknown id is created with the requested agent.
    let fresh = app
        .open_or_create(&SessionId::new("mine-1").unwrap(), Some("karen"))
        .await
        .unwrap();
    assert_eq!(fresh.agent_id(), "karen");
    let default = app.default_session("karen").await.unwrap();
    assert_eq!(default.id.as_str(), "default-karen");
    let fork = app.fork(&karen.id).await.unwrap();
    assert_eq!(fork.agent_id, "karen");
    assert!(
        Arc::ptr_eq(&app.session(&karen.id).await.unwrap(), &opened),
        "one session object for every screen"
    );
}

const SEED_PROMPT: &str = "KAREN 에게 서울 SH 청약 공고 최근 것 하나만 찾아 달라고 맡겨 줘";

/// The seed's delegation scenario (SPEC.md §16.3), answered by script.
const DELEGATION: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "서울 SH 청약 공고 최근 것 하나만 찾아 줘" } } ] }
  - when: { agent: karen, last_role: user }
    reply: { tool_calls: [ { name: sh_notice, arguments: { region: "서울", limit: 1 } } ] }
  - when: { agent: karen, last_role: tool }
    reply: { text: "SH 공고 1건: 서울 강서구 행복주택 입주자 모집 공고 (샘플 데이터)" }
  - when: { agent: main, last_role: tool }
    reply: { text: "KAREN 이 찾았습니다: 서울 강서구 행복주택 입주자 모집 공고" }
"#;

fn by_agent(requests: &[ChatRequest], agent: &str) -> Vec<ChatRequest> {
    requests
        .iter()
        .filter(|r| r.metadata.agent_id == agent)
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_seed_delegation_scenario_makes_four_calls() {
    let home = TempHome::new();
    let (app, faux) = app(&home, DELEGATION).await;
    let jarvis = app.default_session("main").await.unwrap();
    let session = app.session(&jarvis.id).await.unwrap();
    let screen = Arc::new(RecordingAdapter::new());
    let _attached = session.attach(screen.clone());
    let outcome = session.prompt(SEED_PROMPT, Caller::Local).await.unwrap();
    assert_eq!(
        outcome.final_message.content,
        "KAREN 이 찾았습니다: 서울 강서구 행복주택 입주자 모집 공고"
    );

    let requests = faux.requests();
    assert_eq!(
        requests.len(),
        4,
        "JARVIS's decision, KAREN's decision, KAREN's summary, JARVIS's summary"
    );
    let karen = by_agent(&requests, "karen");
    let main = by_agent(&requests, "main");
    assert_eq!((karen.len(), main.len()), (2, 2));
    // KAREN's first request: the delegated request with the rule, her tools only.
    assert_eq!(karen[0].metadata.session_id, "peer-main-karen");
    assert_eq!(
        karen[0].last_user_text(),
        Some("서울 SH 청약 공고 최근 것 하나만 찾아 줘")
    );
    assert!(karen[0].instruction().unwrap().contains(PEER_REQUEST_RULE));
    let karen_tools: Vec<&str> = karen[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert!(karen_tools.contains(&"sh_notice"));
    for forbidden in ["write_file", "run_command", "run_python"] {
        assert!(
            !karen_tools.contains(&forbidden),
            "KAREN must not be offered {forbidden}: {karen_tools:?}"
        );
    }
    // KAREN's second request holds the tool result with a notice from the sample source.
    match karen[1].recorded_messages().last() {
        Some(Message::Tool(t)) => assert!(
            t.content.contains("서울 강서구 행복주택 입주자 모집 공고"),
            "{}",
            t.content
        ),
        other => panic!("expected the sh_notice result, got {other:?}"),
    }
    // JARVIS's second request holds KAREN's answer as the ask_agent result.
    match main[1].recorded_messages().last() {
        Some(Message::Tool(t)) => {
            assert_eq!(t.tool_name, "ask_agent");
            assert_eq!(
                t.content,
                "SH 공고 1건: 서울 강서구 행복주택 입주자 모집 공고 (샘플 데이터)"
            );
        }
        other => panic!("expected the ask_agent result, got {other:?}"),
    }
    assert!(
        !main[0].tools.iter().any(|t| t.name == "sh_notice"),
        "JARVIS never sees KAREN's tools"
    );
    // The peer session shows the exchange; its meta records caller and callee.
    let (meta, entries) = app
        .session_entries(&SessionId::new("peer-main-karen").unwrap())
        .await
        .unwrap();
    assert_eq!((meta.kind, meta.agent_id.as_str()), (SessionKind::Peer, "karen"));
    assert_eq!(
        (meta.caller.as_deref(), meta.callee.as_deref()),
        (Some("main"), Some("karen"))
    );
    let text = serde_json::to_string(&entries).unwrap();
    assert!(text.contains("sh_notice") && text.contains("행복주택"));
    assert!(!text.contains("위임된 요청"), "the rule is never recorded");
    assert!(screen.kinds().iter().any(|k| k == "tool_execution_end"));
}

#[test]
fn a_definitions_model_is_a_name_or_a_map_and_bad_settings_are_refused() {
    let named = parse("bob", "model: small-model").unwrap();
    assert_eq!(
        (named.model.as_str(), named.max_tokens, named.temperature),
        ("small-model", None, None)
    );
    let full = parse(
        "bob",
        "model: { name: small-model, max_tokens: 256, temperature: 0.3 }",
    )
    .unwrap();
    assert_eq!(
        (full.model.as_str(), full.max_tokens, full.temperature),
        ("small-model", Some(256), Some(0.3))
    );
    let inherits = parse("bob", "model: { max_tokens: 64 }").unwrap();
    assert_eq!(
        (inherits.model.as_str(), inherits.max_tokens),
        ("gpt-4o-mini", Some(64))
    );
    for (yaml, says) in [
        ("model: { name: x, provider: openai }", "unknown field `provider`"),
        ("model: { max_tokens: 0 }", "at least 1"),
        ("model: { max_tokens: -5 }", "model:"),
        ("model: { temperature: 9 }", "from 0 to 2"),
        ("model: [a, b]", "a name or"),
    ] {
        let err = parse("bob", yaml).unwrap_err();
        assert!(err.contains(says), "{yaml}: {err}");
    }
}

#[tokio::test]
async fn a_definitions_model_settings_reach_only_its_agents_requests() {
    let home = TempHome::new();
    let karen = KAREN_DEFINITION.replace(
        "model: null ",
        "model: { name: karen-small, max_tokens: 256, temperature: 0.3 } ",
    );
    assert_ne!(karen, KAREN_DEFINITION);
    home.team("karen.yaml", &karen);
    let (app, faux) = app(&home, DELEGATION).await;
    let jarvis = app.default_session("main").await.unwrap();
    let session = app.session(&jarvis.id).await.unwrap();
    session.prompt(SEED_PROMPT, Caller::Local).await.unwrap();
    let requests = faux.requests();
    let karen = by_agent(&requests, "karen");
    assert!(!karen.is_empty());
    for r in &karen {
        assert_eq!(
            (r.model.as_str(), r.max_tokens, r.temperature),
            ("karen-small", Some(256), Some(0.3))
        );
    }
    for r in by_agent(&requests, "main") {
        assert_eq!(
            (r.max_tokens, r.temperature),
            (None, None),
            "JARVIS keeps his own settings"
        );
    }
}

#[tokio::test]
async fn the_peer_session_is_reused_across_delegations() {
    let home = TempHome::new();
    let script = DELEGATION.replace(
        "when: { agent: main, last_role: user }",
        "when: { agent: main, last_role: user, purpose: step }",
    );
    let (app, faux) = app(&home, &script).await;
    let jarvis = app.create_session(None).await.unwrap();
    let session = app.session(&jarvis.id).await.unwrap();
    session.prompt("첫 번째 부탁", Caller::Local).await.unwrap();
    session.prompt("두 번째 부탁", Caller::Local).await.unwrap();
    let peer = SessionId::new("peer-main-karen").unwrap();
    let (_, entries) = app.session_entries(&peer).await.unwrap();
    let users = entries
        .iter()
        .filter(|e| matches!(e.message(), Some(Message::User(_))))
        .count();
    assert_eq!(users, 2, "both delegations in the one pair session");
    let sessions = app.list_sessions().await.unwrap();
    assert_eq!(sessions.iter().filter(|s| s.kind == SessionKind::Peer).count(), 1);
    // KAREN's second delegated turn sees the first one's history.
    let karen = by_agent(&faux.requests(), "karen");
    assert!(karen[2].recorded_messages().len() > karen[0].recorded_messages().len());
}

/// A screen that answers every approval request it sees with `decision`
/// (on session `session`), keeping what it saw; the sub-agent tests use it too.
pub(crate) struct Approving {
    pub(crate) app: AppAssembly,
    pub(crate) session: SessionId,
    pub(crate) decision: ApprovalDecision,
    pub(crate) seen: Mutex<Vec<ApprovalRequest>>,
}

impl UIAdapter for Approving {
    fn on_approval_request(&self, request: &ApprovalRequest) {
        self.seen.lock().unwrap().push(request.clone());
        let (app, session, id, decision) = (
            self.app.clone(),
            self.session.clone(),
            request.request_id.clone(),
            self.decision,
        );
        tokio::spawn(async move {
            app.session(&session)
                .await
                .unwrap()
                .broker()
                .decide(&id, decision);
        });
    }
}

#[tokio::test]
async fn approvals_of_the_callees_tools_reach_the_callers_screens() {
    let home = TempHome::new();
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "강서구 공고를 지켜봐 줘" } } ] }
  - when: { agent: karen, last_role: user }
    reply: { tool_calls: [ { name: housing_watch, arguments: { region: "강서구" } } ] }
  - when: { agent: karen, last_role: tool }
    reply: { text: "지켜보기로 했습니다." }
  - when: { agent: main, last_role: tool }
    reply: { text: "KAREN 이 지켜봅니다." }
"#;
    let (app, _) = app(&home, script).await;
    let jarvis = app.create_session(None).await.unwrap();
    let session = app.session(&jarvis.id).await.unwrap();
    let caller_screen = Arc::new(Approving {
        app: app.clone(),
        session: jarvis.id.clone(),
        decision: ApprovalDecision::Allow,
        seen: Mutex::default(),
    });
    let _a = session.attach(caller_screen.clone());
    // Someone watching the peer session sees its events but is not asked.
    let peer = app
        .open_or_create(&SessionId::new("peer-main-karen").unwrap(), Some("karen"))
        .await;
    assert!(peer.is_ok());
    let peer_screen = Arc::new(RecordingAdapter::new());
    let _p = peer.unwrap().attach(peer_screen.clone());
    let outcome = session
        .prompt("KAREN 에게 강서구 공고 감시를 맡겨", Caller::Local)
        .await
        .unwrap();
    assert_eq!(outcome.final_message.content, "KAREN 이 지켜봅니다.");
    let seen = caller_screen.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].tool_name.as_str(), seen[0].agent_id.as_str()),
        ("housing_watch", "karen")
    );
    assert_eq!(
        seen[0].session_id,
        jarvis.id.as_str(),
        "asked on the calling session"
    );
    assert!(peer_screen.approval_requests().is_empty());
    assert!(
        peer_screen.kinds().iter().any(|k| k == "tool_execution_end"),
        "the peer session's screens see its events"
    );
}

#[tokio::test]
async fn a_peer_session_opened_by_a_person_stays_read_only() {
    let home = TempHome::new();
    let (app, faux) = app(&home, "fallback: { text: ok }").await;
    let _ = app.create_session(None).await.unwrap();
    let store = app.store().clone();
    store
        .get_or_create(jarvis_sdk::agent::NewSession::peer(
            SessionId::new("peer-main-karen").unwrap(),
            "main",
            "karen",
        ))
        .await
        .unwrap();
    let peer = app
        .session(&SessionId::new("peer-main-karen").unwrap())
        .await
        .unwrap();
    let err = peer.prompt("hi", Caller::Local).await.unwrap_err();
    assert!(err.to_string().contains("read but not written"));
    assert_eq!(faux.request_count(), 0);
}

/// A three-agent team for the chain rules.
async fn three(script: &str) -> (TempHome, AppAssembly, Arc<FauxProvider>) {
    let home = TempHome::new();
    home.team("karen.yaml", KAREN_DEFINITION);
    home.team(
        "bob.yaml",
        "name: B.O.B.\ndescription: 계산 담당\ntools: [read_file]\n",
    );
    let (app, faux) = app(&home, script).await;
    (home, app, faux)
}

fn tool_results(requests: &[ChatRequest], agent: &str) -> Vec<String> {
    by_agent(requests, agent)
        .iter()
        .filter_map(|r| match r.recorded_messages().last() {
            Some(Message::Tool(t)) => Some(t.content.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn depth_is_limited_to_three_agents() {
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "A 를 알아봐" } } ] }
  - when: { agent: karen, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: bob, request: "B 를 계산해" } } ] }
  - when: { agent: bob, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: main, request: "C 는 뭐야" } } ] }
  - when: { agent: bob, last_role: tool }
    reply: { text: "bob 의 답" }
  - when: { agent: karen, last_role: tool }
    reply: { text: "karen 의 답" }
  - when: { agent: main, last_role: tool }
    reply: { text: "main 의 답" }
"#;
    let (_home, app, faux) = three(script).await;
    let jarvis = app.create_session(None).await.unwrap();
    let out = app
        .session(&jarvis.id)
        .await
        .unwrap()
        .prompt("시작", Caller::Local)
        .await
        .unwrap();
    assert_eq!(out.final_message.content, "main 의 답");
    let requests = faux.requests();
    let bob = tool_results(&requests, "bob");
    assert_eq!(bob.len(), 1);
    assert!(
        bob[0].contains("세 에이전트까지만") && bob[0].contains("main → karen → bob"),
        "{}",
        bob[0]
    );
    assert_eq!(
        by_agent(&requests, "main").len(),
        2,
        "the fourth hop never reached JARVIS"
    );
}

#[tokio::test]
async fn bouncing_a_task_back_is_refused_but_a_clarifying_question_passes() {
    let script = r#"
rules:
  - when: { agent: main, last_role: user, last_user: "^시작" }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "서울 SH 청약 공고 최근 것 하나만 찾아 줘" } } ] }
  - when: { agent: karen, last_role: user }
    reply: { tool_calls: [
        { name: ask_agent, arguments: { agent: main, request: "서울 SH 청약 공고 최근 하나 찾아줘요" } },
        { name: ask_agent, arguments: { agent: main, request: "관심 분야가 뭐야?" } } ] }
  - when: { agent: main, last_role: user, last_user: "관심 분야" }
    reply: { text: "행복주택이요" }
  - when: { agent: karen, last_role: tool }
    reply: { text: "karen 의 답" }
  - when: { agent: main, last_role: tool }
    reply: { text: "main 의 답" }
"#;
    let (_home, app, faux) = three(script).await;
    let jarvis = app.create_session(None).await.unwrap();
    app.session(&jarvis.id)
        .await
        .unwrap()
        .prompt("시작", Caller::Local)
        .await
        .unwrap();
    let requests = faux.requests();
    let karen_second = &by_agent(&requests, "karen")[1];
    let results: Vec<(String, bool)> = karen_second
        .recorded_messages()
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some((t.content.clone(), t.is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert!(
        results[0].1 && results[0].0.contains("되돌릴 수 없다"),
        "{:?}",
        results[0]
    );
    assert_eq!(
        results[1],
        ("행복주택이요".to_owned(), false),
        "A → B → A with a different question"
    );
    let peer = app
        .session_entries(&SessionId::new("peer-karen-main").unwrap())
        .await
        .unwrap()
        .1;
    assert!(
        serde_json::to_string(&peer)
            .unwrap()
            .contains("관심 분야가 뭐야?")
    );
}

#[tokio::test(start_paused = true)]
async fn a_busy_pair_and_a_slow_callee_are_error_results() {
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [
        { name: ask_agent, arguments: { agent: karen, request: "첫째" } },
        { name: ask_agent, arguments: { agent: karen, request: "둘째" } } ] }
  - when: { agent: karen, last_role: user }
    reply: { delay_ms: 400000, text: "너무 늦은 답" }
  - when: { agent: main, last_role: tool }
    reply: { text: "main 의 답" }
"#;
    let (_home, app, faux) = three(script).await;
    let jarvis = app.create_session(None).await.unwrap();
    let out = app
        .session(&jarvis.id)
        .await
        .unwrap()
        .prompt("시작", Caller::Local)
        .await
        .unwrap();
    assert_eq!(out.final_message.stop_reason, StopReason::Stop);
    let main_second = &by_agent(&faux.requests(), "main")[1];
    let results: Vec<String> = main_second
        .recorded_messages()
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) if t.is_error => Some(t.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results.iter().any(|r| r.contains("did not answer within 300 s")),
        "{results:?}"
    );
    assert!(
        results.iter().any(|r| r.contains("다른 일을 하고 있다")),
        "{results:?}"
    );
}

#[derive(Default)]
struct Observer(Mutex<Vec<(String, String, String)>>);

impl jarvis_sdk::app::SessionObserver for Observer {
    fn on_session_event(&self, session_id: &str, agent_id: &str, event: &jarvis_sdk::agent::AgentEvent) {
        self.0.lock().unwrap().push((
            session_id.to_owned(),
            agent_id.to_owned(),
            event.kind().to_owned(),
        ));
    }
}

#[tokio::test]
async fn an_observer_sees_every_session_including_peer_sessions() {
    let home = TempHome::new();
    let (app, _) = app(&home, DELEGATION).await;
    let observer = Arc::new(Observer::default());
    app.observe(observer.clone());
    let jarvis = app.create_session(None).await.unwrap();
    app.session(&jarvis.id)
        .await
        .unwrap()
        .prompt(SEED_PROMPT, Caller::Local)
        .await
        .unwrap();
    let seen = observer.0.lock().unwrap().clone();
    let starts: Vec<(String, String)> = seen
        .iter()
        .filter(|(_, _, kind)| kind == "agent_start")
        .map(|(s, a, _)| (s.clone(), a.clone()))
        .collect();
    assert_eq!(
        starts,
        [
            (jarvis.id.to_string(), "main".to_owned()),
            ("peer-main-karen".to_owned(), "karen".to_owned())
        ]
    );
    assert_eq!(seen.iter().filter(|(_, _, kind)| kind == "agent_end").count(), 2);
    assert_eq!(app.open_sessions().len(), 2);
}

// ---- memory in the assembled app (SPEC.md §8) ----

fn user_texts(request: &ChatRequest) -> Vec<&str> {
    request
        .recorded_messages()
        .iter()
        .filter_map(|m| match m {
            Message::User(u) => Some(u.content.as_str()),
            _ => None,
        })
        .collect()
}

async fn all_episodes(memory: &jarvis_sdk::memory::MemoryService) -> Vec<jarvis_sdk::memory::MemoryRecord> {
    let filter = jarvis_sdk::memory::MemoryFilter::for_user(jarvis_sdk::memory::DEFAULT_USER).layer(
        jarvis_sdk::memory::Layer::Episodic,
        jarvis_sdk::memory::Agents::Any,
    );
    memory.store().list(&filter).await.unwrap()
}

#[tokio::test]
async fn every_agent_has_the_memory_tools_unless_memory_is_off() {
    let home = TempHome::new();
    let (app, _) = app(&home, DELEGATION).await;
    assert!(app.memory().is_some());
    for agent in app.registry().agents() {
        for tool in ["remember_task_pattern", "recall_episodes"] {
            assert!(agent.has_tool(tool), "{} lacks {tool}", agent.id);
        }
    }
    drop(app);

    let off = TempHome::new();
    let faux = Arc::new(FauxProvider::from_yaml(DELEGATION).unwrap());
    let mut config = AppConfig::for_home(&off.0).with_provider(faux).without_memory();
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    let app = build_app(config).await.unwrap();
    assert!(app.memory().is_none());
    assert!(app.tools().get("recall_episodes").is_none());
    assert!(!app.registry().main().has_tool("remember_task_pattern"));
}

#[tokio::test]
async fn a_remembered_fact_reaches_the_model_before_the_last_turns_and_each_turn_leaves_an_episode() {
    let home = TempHome::new();
    let script = r#"
fallback: { text: "네." }
"#;
    let (app, faux) = app(&home, script).await;
    let memory = app.memory().unwrap().clone();
    let jarvis = app.default_session("main").await.unwrap();
    let scope =
        jarvis_sdk::memory::MemoryScope::new(jarvis_sdk::memory::DEFAULT_USER, "main", jarvis.id.as_str());
    memory
        .remember(&scope, "사용자는 서울 마포구에 산다")
        .await
        .unwrap();

    let session = app.session(&jarvis.id).await.unwrap();
    session.prompt("마포구 공고 알려줘", Caller::Local).await.unwrap();
    let requests = faux.requests();
    let texts = user_texts(&requests[0]);
    assert_eq!(texts.len(), 2, "the memory message, then the prompt: {texts:?}");
    assert!(
        texts[0].contains("[핵심 사실]") && texts[0].contains("마포구에 산다"),
        "{}",
        texts[0]
    );
    assert_eq!(texts[1], "마포구 공고 알려줘");

    let episodes = all_episodes(&memory).await;
    assert_eq!(episodes.len(), 1, "{episodes:?}");
    assert_eq!(episodes[0].agent_id, "main");
    assert_eq!(episodes[0].metadata["session_id"], jarvis.id.as_str());
    // The memory message is never recorded in the session.
    let (_, entries) = app.session_entries(&jarvis.id).await.unwrap();
    assert!(!serde_json::to_string(&entries).unwrap().contains("[핵심 사실]"));
}

#[tokio::test]
async fn a_delegated_turn_writes_to_the_callees_scope_for_the_callers_user() {
    let home = TempHome::new();
    let (app, _) = app(&home, DELEGATION).await;
    let jarvis = app.default_session("main").await.unwrap();
    let session = app.session(&jarvis.id).await.unwrap();
    session.prompt(SEED_PROMPT, Caller::Local).await.unwrap();
    let memory = app.memory().unwrap();
    let episodes = all_episodes(memory).await;
    let mut owners: Vec<(String, String)> = episodes
        .iter()
        .map(|e| {
            (
                e.agent_id.clone(),
                e.metadata["session_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    owners.sort();
    assert_eq!(
        owners,
        [
            ("karen".to_owned(), "peer-main-karen".to_owned()),
            ("main".to_owned(), jarvis.id.to_string()),
        ]
    );
    let karen = episodes.iter().find(|e| e.agent_id == "karen").unwrap();
    assert_eq!(karen.metadata["tools"], serde_json::json!(["sh_notice"]));
}

#[tokio::test]
async fn memory_read_naming_an_agent_the_team_lacks_is_dropped_and_the_agent_loads() {
    let home = TempHome::new();
    home.team(
        "scout.yaml",
        "name: SCOUT\ndescription: looks around\nmemory:\n  read:\n    edm: [self, main, ghost]\n",
    );
    let (app, _) = app(&home, DELEGATION).await;
    let scout = app.registry().get("scout").expect("scout loads");
    assert_eq!(scout.memory_read.edm, ["self", "main"]);
}

/// Answers every approval request of a session with `decision`, on a task
/// of its own (screens must not block).
/// A screen that answers every approval request of session `.1` with `.2`.
pub(crate) struct AnswerAll(
    pub(crate) AppAssembly,
    pub(crate) SessionId,
    pub(crate) ApprovalDecision,
);

impl UIAdapter for AnswerAll {
    fn on_approval_request(&self, request: &ApprovalRequest) {
        let (app, id, decision) = (self.0.clone(), self.1.clone(), self.2);
        let request_id = request.request_id.clone();
        tokio::spawn(async move {
            app.session(&id)
                .await
                .unwrap()
                .broker()
                .decide(&request_id, decision);
        });
    }
}

#[tokio::test]
async fn the_offline_demo_answers_uses_tools_and_delegates_to_karen_on_sample_notices() {
    let home = TempHome::new();
    // Nothing configured: the demo model, the housing pack's team, sample
    // notices (as the `jarvis` binary assembles it).
    let vars = [("JARVIS_HOME", home.0.to_str().unwrap())];
    let config = AppConfig::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
        .unwrap()
        .with_pack(Arc::new(HousingPack::from_env()));
    assert!(config.is_demo());
    let app = build_app(config).await.unwrap();
    assert!(app.is_demo());
    assert!(app.notice().unwrap().contains("offline demo"));
    assert_eq!(app.registry().ids().collect::<Vec<_>>(), ["main", "karen"]);
    let meta = app.default_session("main").await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    let screen = Arc::new(RecordingAdapter::new());
    let _s = session.attach(screen.clone());
    let _a = session.attach(Arc::new(AnswerAll(
        app.clone(),
        meta.id.clone(),
        ApprovalDecision::Allow,
    )));

    // JARVIS answers.
    let hello = session.prompt("안녕, 자비스", Caller::Local).await.unwrap();
    assert!(hello.final_message.content.contains("오프라인 데모"), "{hello:?}");
    // JARVIS uses a tool.
    let tool = session.prompt("도구 써 봐", Caller::Local).await.unwrap();
    assert!(tool.final_message.content.contains("list_dir"));
    // JARVIS asks to write a note; the approval is answered.
    let note = session.prompt("메모 남겨 줘", Caller::Local).await.unwrap();
    assert!(note.final_message.content.contains("notes/demo.txt"));
    let written = std::fs::read_to_string(
        home.0
            .join("sandboxes")
            .join(meta.id.as_str())
            .join("notes/demo.txt"),
    )
    .unwrap();
    assert!(written.contains("오프라인 데모"), "{written}");
    // JARVIS delegates to KAREN, who looks up sample notices.
    let karen = session.prompt("청약 공고 찾아 줘", Caller::Local).await.unwrap();
    assert!(karen.final_message.content.contains("K.A.R.E.N."));
    let ends: Vec<(String, bool, String)> = screen
        .events()
        .into_iter()
        .filter_map(|e| match e {
            jarvis_sdk::agent::AgentEvent::ToolExecutionEnd {
                tool_name,
                is_error,
                result,
                ..
            } => Some((tool_name, is_error, result)),
            _ => None,
        })
        .collect();
    let names: Vec<&str> = ends.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["list_dir", "write_file", "ask_agent"]);
    assert!(ends.iter().all(|(_, is_error, _)| !is_error), "{ends:?}");
    let (_, peer_entries) = app
        .session_entries(&SessionId::new("peer-main-karen").unwrap())
        .await
        .unwrap();
    let peer_text = serde_json::to_string(&peer_entries).unwrap();
    assert!(peer_text.contains("sh_notice"), "{peer_text}");
    assert!(
        peer_text.contains("샘플 데이터"),
        "the notices come from the sample source"
    );
}

#[test]
fn store_durability_and_the_demo_come_from_the_environment() {
    let lookup = |vars: &'static [(&'static str, &'static str)]| {
        AppConfig::from_lookup(move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    };
    let c = lookup(&[("JARVIS_HOME", "/tmp/x")]).unwrap();
    assert_eq!(c.durability, jarvis_sdk::agent::Durability::EndOfTurn);
    let c = lookup(&[("JARVIS_HOME", "/tmp/x"), ("JARVIS_STORE__FSYNC", "never")]).unwrap();
    assert_eq!(c.durability, jarvis_sdk::agent::Durability::Never);
    let e = lookup(&[("JARVIS_HOME", "/tmp/x"), ("JARVIS_STORE__FSYNC", "sometimes")]).unwrap_err();
    assert!(e.to_string().contains("end_of_turn or never"), "{e}");
    // A configured model is not the demo.
    let c = lookup(&[("JARVIS_HOME", "/tmp/x"), ("OPENAI_API_KEY", "sk-1")]).unwrap();
    assert!(!c.is_demo());
    let c = lookup(&[
        ("JARVIS_HOME", "/tmp/x"),
        ("JARVIS_FAUX__SCRIPT", "/s.yaml"),
        ("JARVIS_LLM__PROVIDER", "faux"),
    ])
    .unwrap();
    assert!(!c.is_demo(), "a faux script is not the demo");
}

#[test]
fn the_memory_store_comes_from_the_environment() {
    use jarvis_sdk::app::MemoryBackend;
    let lookup = |vars: &'static [(&'static str, &'static str)]| {
        AppConfig::from_lookup(move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    };
    let backend = |vars| lookup(vars).unwrap().memory.backend;
    assert_eq!(backend(&[("JARVIS_HOME", "/tmp/x")]), MemoryBackend::Auto);
    for (value, expected) in [
        ("auto", MemoryBackend::Auto),
        ("SQLite", MemoryBackend::Sqlite),
        (" memory ", MemoryBackend::Memory),
    ] {
        let vars: &'static [(&'static str, &'static str)] = Box::leak(Box::new([
            ("JARVIS_HOME", "/tmp/x"),
            ("JARVIS_MEMORY__STORE", value),
        ]));
        assert_eq!(backend(vars), expected, "{value}");
    }
    assert_eq!(
        backend(&[
            ("JARVIS_HOME", "/tmp/x"),
            ("JARVIS_MEMORY__STORE", "postgres"),
            ("JARVIS_STORE__POSTGRES_URL", "postgres://me@db/jarvis"),
        ]),
        MemoryBackend::Postgres {
            url: "postgres://me@db/jarvis".into()
        }
    );
    let e = lookup(&[("JARVIS_HOME", "/tmp/x"), ("JARVIS_MEMORY__STORE", "postgres")]).unwrap_err();
    assert!(e.to_string().contains("needs JARVIS_STORE__POSTGRES_URL"), "{e}");
    let e = lookup(&[("JARVIS_HOME", "/tmp/x"), ("JARVIS_MEMORY__STORE", "redis")]).unwrap_err();
    assert!(
        e.to_string().contains("JARVIS_MEMORY__STORE=redis")
            && e.to_string().contains("auto, sqlite, memory or postgres"),
        "{e}"
    );
    // An embedded app keeps memory in the process, like its sessions,
    // unless asked otherwise.
    assert_eq!(
        AppConfig::embedded("/tmp/x").memory.backend,
        MemoryBackend::Memory
    );
    assert_eq!(
        AppConfig::embedded("/tmp/x")
            .with_memory_backend(MemoryBackend::Sqlite)
            .memory
            .backend,
        MemoryBackend::Sqlite
    );
}

#[tokio::test]
async fn a_home_keeps_memory_in_sqlite_unless_told_otherwise() {
    use jarvis_sdk::app::MemoryBackend;
    use jarvis_sdk::memory::{InMemoryMemoryStore, MemoryScope};
    let script = "fallback: { text: \"ok\" }";
    let remembered = |app: &AppAssembly| {
        let memory = app.memory().unwrap().clone();
        async move {
            let scope = MemoryScope::new(jarvis_sdk::memory::DEFAULT_USER, MAIN_AGENT, "s");
            memory.remember(&scope, "우리 고양이 이름은 나비").await.unwrap();
        }
    };
    // The default: a file, and the memory is there after a restart.
    let home = TempHome::new();
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let app = build_app(AppConfig::for_home(&home.0).with_provider(faux.clone()))
        .await
        .unwrap();
    remembered(&app).await;
    drop(app);
    assert!(home.0.join("memory.sqlite3").exists());
    let app = build_app(AppConfig::for_home(&home.0).with_provider(faux.clone()))
        .await
        .unwrap();
    let scope = app.memory_scope(MAIN_AGENT, "s2").unwrap();
    let found = app
        .memory()
        .unwrap()
        .search(&scope, "고양이 이름", jarvis_sdk::memory::Layer::Semantic, 3)
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "memory came back after the restart");
    drop(app);

    // `memory`, and a store of one's own, write no database.
    for config in [
        AppConfig::for_home(&TempHome::new().0).with_memory_backend(MemoryBackend::Memory),
        AppConfig::for_home(&TempHome::new().0)
            .with_memory_backend(MemoryBackend::Sqlite)
            .with_memory_store(Arc::new(InMemoryMemoryStore::new())),
    ] {
        let home = config.home.clone();
        let app = build_app(config.with_provider(faux.clone())).await.unwrap();
        remembered(&app).await;
        assert!(!home.join("memory.sqlite3").exists(), "{}", home.display());
        let _ = std::fs::remove_dir_all(&home);
    }
}

#[test]
fn mcp_names_are_kept_and_a_definitions_servers_are_its_own() {
    let profile = parse(
        "karen",
        "tools: [read_file, time__get_current_time, files__*, nope]\nmcp:\n  files: { command: srv, args: [\"${TEAM_TEST_TOKEN}\"] }\n",
    )
    .unwrap();
    assert_eq!(
        profile.mcp_tools,
        Some(vec!["time__get_current_time".to_owned(), "files__*".to_owned()])
    );
    assert!(profile.has_tool("read_file") && !profile.has_tool("nope"));
    assert!(
        !profile.has_tool("time__get_current_time"),
        "MCP names are not built-in tools"
    );
    let server = &profile.mcp_servers[0];
    assert_eq!(server.owner.as_deref(), Some("karen"));
    assert!(server.serves("karen") && !server.serves("main"));
    assert_eq!(
        server.transport,
        jarvis_sdk::turn::McpTransport::Stdio {
            command: "srv".into(),
            args: vec!["t0ken".into()],
            env: Default::default(),
        }
    );
    // No list: every MCP tool of the servers serving the agent.
    assert_eq!(parse("karen", "name: K").unwrap().mcp_tools, None);
    // A list without MCP names: none.
    assert_eq!(
        parse("karen", "tools: [read_file]").unwrap().mcp_tools,
        Some(vec![])
    );
    // A bad server skips the definition, with the reason.
    let bad = parse("karen", "mcp: { x: { url: \"ftp://a\" } }").unwrap_err();
    assert!(bad.contains("mcp.x") && bad.contains("not an http"), "{bad}");
    let unset = parse(
        "karen",
        "mcp: { x: { url: \"http://a/${UNSET_FOR_TEAM_TEST}\" } }",
    )
    .unwrap_err();
    assert!(unset.contains("UNSET_FOR_TEAM_TEST is not set"), "{unset}");
}

#[tokio::test]
async fn on_the_return_leg_a_to_b_to_a_the_approval_reaches_the_persons_session() {
    let script = r#"
rules:
  - when: { agent: main, last_role: user, last_user: "^시작" }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "대출 이자를 계산해 줘" } } ] }
  - when: { agent: karen, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: main, request: "메모 파일 하나 써 줄래?" } } ] }
  - when: { agent: main, last_role: user, last_user: "메모 파일" }
    reply: { tool_calls: [ { name: write_file, arguments: { path: "memo.txt", content: "돌아온 길" } } ] }
  - when: { agent: main, last_role: tool, last_user: "메모 파일" }
    reply: { text: "메모를 썼다" }
  - when: { agent: karen, last_role: tool }
    reply: { text: "karen 의 답" }
  - when: { agent: main, last_role: tool }
    reply: { text: "main 의 답" }
"#;
    let home = TempHome::new();
    let (app, faux) = app(&home, script).await;
    let jarvis = app.create_session(None).await.unwrap();
    let session = app.session(&jarvis.id).await.unwrap();
    let screen = Arc::new(Approving {
        app: app.clone(),
        session: jarvis.id.clone(),
        decision: ApprovalDecision::Allow,
        seen: Mutex::default(),
    });
    let _a = session.attach(screen.clone());
    let out = session.prompt("시작", Caller::Local).await.unwrap();
    assert_eq!(out.final_message.content, "main 의 답");
    let seen = screen.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        (
            seen[0].tool_name.as_str(),
            seen[0].agent_id.as_str(),
            seen[0].session_id.as_str()
        ),
        ("write_file", "main", jarvis.id.as_str()),
        "asked on the person's session, not on peer-main-karen"
    );
    let results = tool_results(&faux.requests(), "main");
    assert!(
        results
            .iter()
            .any(|r| r.contains("memo.txt") && !r.contains("approval")),
        "the allowed call ran: {results:?}"
    );
    let written = std::fs::read_to_string(home.0.join("sandboxes/peer-karen-main/memo.txt")).unwrap();
    assert_eq!(written, "돌아온 길");
}

#[tokio::test]
async fn the_callees_boundaries_ask_and_never_hold_in_a_delegated_turn() {
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: bob, request: "파일 목록과 내용을 봐 줘" } } ] }
  - when: { agent: bob, last_role: user }
    reply: { tool_calls: [
        { name: list_dir, arguments: { path: "." } },
        { name: read_file, arguments: { path: "x.txt" } } ] }
  - when: { agent: bob, last_role: tool }
    reply: { text: "bob 의 답" }
  - when: { agent: main, last_role: tool }
    reply: { text: "main 의 답" }
"#;
    let home = TempHome::new();
    home.team(
        "bob.yaml",
        "name: B.O.B.\ndescription: 파일 담당\ntools: [list_dir, read_file]\nboundaries:\n  ask: [list_dir]\n  never: [read_file]\n",
    );
    let (app, faux) = app(&home, script).await;
    let jarvis = app.create_session(None).await.unwrap();
    let session = app.session(&jarvis.id).await.unwrap();
    let screen = Arc::new(Approving {
        app: app.clone(),
        session: jarvis.id.clone(),
        decision: ApprovalDecision::Deny,
        seen: Mutex::default(),
    });
    let _a = session.attach(screen.clone());
    let out = session.prompt("시작", Caller::Local).await.unwrap();
    assert_eq!(out.final_message.content, "main 의 답");
    let seen = screen.seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter()
            .map(|r| (r.tool_name.as_str(), r.agent_id.as_str()))
            .collect::<Vec<_>>(),
        [("list_dir", "bob")],
        "bob's boundaries.ask makes list_dir ask, though it never asks by default"
    );
    let bob = by_agent(&faux.requests(), "bob");
    let last = bob.last().unwrap().recorded_messages();
    let results: Vec<(String, bool, String)> = last
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some((t.tool_name.clone(), t.is_error, t.content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results.iter().all(|(_, is_error, _)| *is_error), "{results:?}");
    assert!(
        results[1].2.contains("never"),
        "read_file refused by boundaries.never: {results:?}"
    );
}
