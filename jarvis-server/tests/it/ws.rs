//! The WebSocket against a server on 127.0.0.1:0, with a real client.

use jarvis_sdk::agent::EntryBody;
use jarvis_server::{Limits, ServerConfig, ServerFile};
use serde_json::{Value, json};

use crate::support::{Opened, Server, TempHome, Ws, app, app_with, eventually, kinds};
use tokio_tungstenite::tungstenite::protocol::frame::Frame as RawFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data as OpData, OpCode};

const TOOL_THEN_TEXT: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: list_dir, arguments: { path: "." } } ] }
  - when: { agent: main, last_role: tool }
    reply: { text: "done", chunks: 2 }
  - when: { agent: karen }
    reply: { text: "karen here" }
"#;

/// J.A.R.V.I.S. writes a file, which needs a person's approval.
pub(crate) const APPROVAL: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: write_file, arguments: { path: "a.txt", content: "x" } } ] }
  - when: { agent: main, last_role: tool }
    reply: { text: "written" }
"#;

const SLOW: &str = r#"
rules:
  - when: { last_user: "slow" }
    reply: { delay_ms: 60000, text: "late" }
fallback: { text: "quick" }
"#;

/// J.A.R.V.I.S. asks K.A.R.E.N., who looks notices up and answers.
pub(crate) const DELEGATION: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "서울 공고 찾아 줘" } } ] }
  - when: { agent: karen, last_role: user }
    reply: { tool_calls: [ { name: sh_notice, arguments: { region: "서울" } } ] }
  - when: { agent: karen, last_role: tool }
    reply: { text: "찾았습니다" }
  - when: { agent: main, last_role: tool }
    reply: { text: "KAREN 이 찾았습니다" }
"#;

fn prompt(text: &str) -> Value {
    json!({"type": "prompt", "text": text})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_streams_every_event_in_order() {
    let home = TempHome::new();
    let server = Server::start(app(&home, TOOL_THEN_TEXT).await, ServerConfig::loopback(0)).await;
    let mut ws = Ws::connect(&server.ws_url("session_id=s-order&agent=main")).await;
    assert_eq!(ws.seen[0], json!({"type": "agent_activity", "active": []}));
    ws.send(prompt("look around")).await;
    let frames = ws.until("agent_end").await;
    assert_eq!(
        kinds(&frames),
        [
            "agent_activity",
            "agent_start",
            "turn_start",
            "tool_execution_start",
            "tool_execution_end",
            "turn_start",
            "message_update",
            "message_update",
            "agent_activity",
            "agent_end",
        ]
    );
    assert_eq!(frames[0]["active"], json!(["main"]));
    assert_eq!(frames[1]["agent_id"], "main");
    assert_eq!(frames[1]["session_id"], "s-order");
    assert_eq!(
        (frames[2]["turn"].as_u64(), frames[5]["turn"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(frames[3]["tool_name"], "list_dir");
    assert_eq!(frames[4]["is_error"], false);
    let text: String = frames[6..8]
        .iter()
        .map(|f| f["text_delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "done");
    assert_eq!(frames[8]["active"], json!([]));
    assert_eq!(frames[9]["final_message"]["content"], "done");
    assert_eq!(frames[9]["final_message"]["stop_reason"], "stop");
    assert_eq!(frames[9]["turns"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_connections_share_events_and_approvals_and_the_first_answer_wins() {
    let home = TempHome::new();
    let server = Server::start(app(&home, APPROVAL).await, ServerConfig::loopback(0)).await;
    let url = server.ws_url("session_id=s-shared");
    let mut a = Ws::connect(&url).await;
    let mut b = Ws::connect(&url).await;
    a.send(prompt("write it")).await;
    let request_a = a.until("approval_request").await.pop().unwrap();
    let request_b = b.until("approval_request").await.pop().unwrap();
    assert_eq!(request_a, request_b, "both screens are asked the same");
    let id = request_a["request_id"].as_str().unwrap().to_owned();
    assert_eq!(
        (
            &request_a["session_id"],
            &request_a["agent_id"],
            &request_a["tool_name"]
        ),
        (&json!("s-shared"), &json!("main"), &json!("write_file"))
    );
    assert_eq!(request_a["args"], json!({"path": "a.txt", "content": "x"}));

    b.send(json!({"type": "approval", "request_id": id, "decision": "allow"}))
        .await;
    let resolved_a = a.until("approval_resolved").await.pop().unwrap();
    let resolved_b = b.until("approval_resolved").await.pop().unwrap();
    assert_eq!(
        resolved_a,
        json!({"type": "approval_resolved", "request_id": id, "decision": "allow"})
    );
    assert_eq!(resolved_a, resolved_b);
    // A late answer changes nothing and says so.
    a.send(json!({"type": "approval", "request_id": id, "decision": "deny"}))
        .await;
    let frames = a.until_match(|f| f["type"] == "error").await;
    assert_eq!(frames.last().unwrap()["code"], "approval_not_pending");
    // Both see the whole turn, with the call allowed.
    let ends = [a.until("agent_end").await, b.until("agent_end").await];
    for (frames, screen) in ends.iter().zip([&a, &b]) {
        let end = frames.last().unwrap();
        assert_eq!(end["final_message"]["content"], "written");
        let tool_end = screen
            .seen
            .iter()
            .find(|f| f["type"] == "tool_execution_end")
            .unwrap();
        assert_eq!(tool_end["is_error"], false, "{tool_end}");
    }
    let file = home.0.join("sandboxes/s-shared/a.txt");
    assert_eq!(std::fs::read_to_string(file).unwrap(), "x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_agents_close_4404_and_existing_sessions_ignore_agent() {
    let home = TempHome::new();
    let app = app(&home, TOOL_THEN_TEXT).await;
    let karen = app.create_session(Some("karen")).await.unwrap();
    let server = Server::start(app, ServerConfig::loopback(0)).await;
    match Ws::open(&server.ws_url("session_id=s-new&agent=nobody"), &[]).await {
        Opened::Closed(code, _) => assert_eq!(code, 4404),
        other => panic!("{other:?}"),
    }
    assert!(
        server
            .state
            .app()
            .list_sessions()
            .await
            .unwrap()
            .iter()
            .all(|s| s.id.as_str() != "s-new"),
        "no session was created for an unknown agent"
    );
    for bad in ["agent=main", "session_id=", "session_id=..%2Fetc"] {
        match Ws::open(&server.ws_url(bad), &[]).await {
            Opened::Closed(code, _) => assert_eq!(code, 4400, "{bad}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    // An existing session opens with its stored agent, whatever `agent` says.
    for agent in ["main", "nobody"] {
        let mut ws = Ws::connect(&server.ws_url(&format!("session_id={}&agent={agent}", karen.id))).await;
        ws.send(prompt("hi")).await;
        let frames = ws.until("agent_end").await;
        let start = frames.iter().find(|f| f["type"] == "agent_start").unwrap();
        assert_eq!(start["agent_id"], "karen", "agent={agent}");
        assert_eq!(frames.last().unwrap()["final_message"]["content"], "karen here");
    }
    // A new session gets the agent asked for.
    let mut ws = Ws::connect(&server.ws_url("session_id=s-karen&agent=karen")).await;
    ws.send(prompt("hi")).await;
    let frames = ws.until("agent_end").await;
    assert_eq!(
        frames.iter().find(|f| f["type"] == "agent_start").unwrap()["agent_id"],
        "karen"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_ends_the_turn_and_a_second_prompt_is_busy() {
    let home = TempHome::new();
    let server = Server::start(app(&home, SLOW).await, ServerConfig::loopback(0)).await;
    let url = server.ws_url("session_id=s-abort");
    let mut a = Ws::connect(&url).await;
    let mut b = Ws::connect(&url).await;
    a.send(prompt("slow please")).await;
    a.until("turn_start").await;
    a.send(prompt("another")).await;
    let busy = a.until_match(|f| f["type"] == "error").await.pop().unwrap();
    assert_eq!(busy["code"], "busy");
    b.send(prompt("me too")).await;
    let busy = b.until_match(|f| f["type"] == "error").await.pop().unwrap();
    assert_eq!(busy["code"], "busy", "busy for every connection of the session");

    b.send(json!({"type": "abort"})).await;
    let end = a.until("agent_end").await.pop().unwrap();
    assert_eq!(end["final_message"]["stop_reason"], "aborted");
    b.until("agent_end").await;
    // The session takes prompts again.
    a.send(prompt("now quick")).await;
    let end = a.until("agent_end").await.pop().unwrap();
    assert_eq!(end["final_message"]["content"], "quick");
    // Aborting when nothing runs is harmless.
    a.send(json!({"type": "abort"})).await;
    a.send(prompt("again")).await;
    assert_eq!(
        a.until("agent_end").await.pop().unwrap()["final_message"]["content"],
        "quick"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_get_an_error_and_the_connection_survives() {
    let home = TempHome::new();
    let server = Server::start(app(&home, SLOW).await, ServerConfig::loopback(0)).await;
    let mut ws = Ws::connect(&server.ws_url("session_id=s-bad")).await;
    let bad: [&str; 7] = [
        "not json",
        "{}",
        r#"{"type": "sing"}"#,
        r#"{"type": "prompt"}"#,
        r#"{"type": "approval", "request_id": "r", "decision": "maybe"}"#,
        r#"{"type": "proactive_feedback", "message_id": "m", "reaction": "loved"}"#,
        r#"[1, 2, 3]"#,
    ];
    for text in bad {
        ws.send_text(text).await;
        let error = ws.next().await;
        assert_eq!(
            (error["type"].as_str(), error["code"].as_str()),
            (Some("error"), Some("bad_request")),
            "{text}: {error}"
        );
    }
    ws.send_binary(vec![1, 2, 3]).await;
    assert_eq!(ws.next().await["code"], "bad_request");
    // Input the security pipeline refuses: every screen sees input_rejected,
    // the sender also gets an error.
    ws.send(prompt("   ")).await;
    let frames = ws.until_match(|f| f["type"] == "error").await;
    assert_eq!(kinds(&frames), ["input_rejected", "error"], "{frames:?}");
    assert_eq!(frames[1]["code"], "invalid_input");
    ws.send(prompt("<script>alert(1)</script>")).await;
    let frames = ws.until_match(|f| f["type"] == "error").await;
    assert_eq!(frames[1]["code"], "invalid_input");
    // Feedback on a message the daemon did not send is taken quietly and
    // teaches nothing.
    ws.send(json!({"type": "proactive_feedback", "message_id": "m-1", "reaction": "dismissed"}))
        .await;
    ws.send(prompt("hello")).await;
    let frames = ws.until("agent_end").await;
    assert_eq!(frames.last().unwrap()["final_message"]["content"], "quick");
    assert!(!kinds(&frames).contains(&"error".to_owned()), "{frames:?}");
    let propensity = server.state.app().registry().main().feedback.propensity();
    assert_eq!(propensity, 0.5, "an unknown message id reaches no learner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_promise_reaches_the_screen_and_its_dismissal_teaches_that_agent() {
    let home = TempHome::new();
    let server = Server::start(app(&home, SLOW).await, ServerConfig::loopback(0)).await;
    let app = server.state.app().clone();
    let mut ws = Ws::connect(&server.ws_url("session_id=s-karen&agent=karen")).await;
    let now = jarvis_sdk::common::Timestamp::from_system_time(std::time::SystemTime::now());
    app.open_loops()
        .open(jarvis_sdk::agent::OpenLoop {
            id: "loop-1".into(),
            session_id: "s-karen".into(),
            agent_id: "karen".into(),
            text: "청약 서류 챙기기".into(),
            kind: jarvis_sdk::agent::LoopKind::Promise,
            due: Some(jarvis_sdk::common::Timestamp::from_millis(now.as_millis() - 1000)),
            condition: None,
            created_at: now,
            closed_at: None,
            reminded_at: None,
        })
        .await
        .unwrap();
    // The AGENDA lists it with KAREN's label.
    let agenda: Value = reqwest::get(format!("http://{}/api/agenda", server.addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let promise = agenda["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "promise")
        .unwrap_or_else(|| panic!("{agenda}"))
        .clone();
    assert_eq!(promise["agent_id"], "karen", "{agenda}");
    assert_eq!(
        promise["color"],
        app.registry().get("karen").unwrap().palette.primary
    );
    assert_eq!(promise["session_id"], "s-karen");

    let report = app.proactive().tick().await;
    assert_eq!(report.sent.len(), 1, "{report:?}");
    let frames = ws.until("proactive_message").await;
    let message = frames.last().unwrap();
    assert_eq!(message["kind"], "proactive");
    assert!(
        message["text"].as_str().unwrap().contains("청약 서류 챙기기"),
        "{message}"
    );
    ws.send(
        json!({"type": "proactive_feedback", "message_id": message["message_id"], "reaction": "dismissed"}),
    )
    .await;
    let karen = app.registry().get("karen").unwrap().feedback.clone();
    eventually(async || karen.propensity() < 0.5).await;
    assert_eq!(
        app.registry().main().feedback.propensity(),
        0.5,
        "JARVIS's learner is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sessions_are_unaffected() {
    let home = TempHome::new();
    let server = Server::start(app(&home, SLOW).await, ServerConfig::loopback(0)).await;
    let mut a = Ws::connect(&server.ws_url("session_id=s-a")).await;
    let mut b = Ws::connect(&server.ws_url("session_id=s-b")).await;
    a.send(prompt("slow")).await;
    a.until("turn_start").await;
    // B works while A's turn runs, and sees none of A's events.
    b.send(prompt("quick")).await;
    let frames = b.until("agent_end").await;
    assert_eq!(frames.last().unwrap()["final_message"]["content"], "quick");
    for frame in &frames {
        assert!(
            frame["type"] == "agent_activity" || frame["session_id"].as_str().is_none_or(|s| s == "s-b"),
            "{frame}"
        );
    }
    let starts: Vec<&Value> = frames.iter().filter(|f| f["type"] == "agent_start").collect();
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0]["session_id"], "s-b");
    // A's turn is still running, and A saw nothing of B's turn.
    assert!(
        a.seen
            .iter()
            .all(|f| f["type"] == "agent_activity" || f["session_id"].as_str().is_none_or(|s| s == "s-a"))
    );
    a.send(json!({"type": "abort"})).await;
    let end = a.until("agent_end").await.pop().unwrap();
    assert_eq!(end["final_message"]["stop_reason"], "aborted");
    assert!(
        !a.seen.iter().any(|f| f["type"] == "message_update"),
        "A never saw B's text"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_is_required_and_closes_4401() {
    let home = TempHome::new();
    let app = app_with(&home, SLOW, Some("s3cret")).await;
    let server = Server::start(app, ServerConfig::loopback(0).with_token("s3cret")).await;
    let url = server.ws_url("session_id=s-tok");
    for (query, headers) in [
        ("", vec![]),
        ("&token=wrong", vec![]),
        // The URL is not a place for the token: the right one there is ignored.
        ("&token=s3cret", vec![]),
        ("", vec![("authorization", "Bearer wrong")]),
        ("", vec![("authorization", "Bearer s3cre")]),
        ("", vec![("cookie", "jarvis_token=s3cret-and-more")]),
    ] {
        match Ws::open(&format!("{url}{query}"), &headers).await {
            Opened::Closed(code, _) => assert_eq!(code, 4401, "{query} {headers:?}"),
            other => panic!("{other:?}"),
        }
    }
    for headers in [
        [("authorization", "Bearer s3cret")],
        [("cookie", "jarvis_token=s3cret")],
    ] {
        match Ws::open(&url, &headers).await {
            Opened::Open(mut ws) => {
                ws.send(prompt("hello")).await;
                ws.until("agent_end").await;
            }
            other => panic!("{headers:?}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_servers_own_origin_or_no_origin_opens_a_socket() {
    let home = TempHome::new();
    let server = Server::start(app(&home, SLOW).await, ServerConfig::loopback(0)).await;
    let url = server.ws_url("session_id=s-origin");
    let port = server.addr.port();
    // A dev server on another local port, the same host on another port or
    // scheme, the same port under another name, and pages with no origin.
    for origin in [
        "http://localhost:5173".to_owned(),
        format!("http://127.0.0.1:{}", port.wrapping_add(1)),
        format!("https://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        "https://evil.example".to_owned(),
        "null".to_owned(),
    ] {
        match Ws::open(&url, &[("origin", &origin)]).await {
            Opened::Refused(status) => assert_eq!(status, 403, "{origin}"),
            other => panic!("{origin}: {other:?}"),
        }
    }
    assert!(
        server.state.app().list_sessions().await.unwrap().is_empty(),
        "no refused socket created its session"
    );
    // The CLI and scripts send no Origin.
    let mut ws = match Ws::open(&url, &[]).await {
        Opened::Open(ws) => ws,
        other => panic!("without Origin: {other:?}"),
    };
    ws.send(prompt("hello")).await;
    assert_eq!(
        ws.until("agent_end").await.pop().unwrap()["final_message"]["content"],
        "quick"
    );
    // The HUD's own page, as the browser reached the server.
    let own = format!("http://{}", server.addr);
    assert!(
        matches!(Ws::open(&url, &[("origin", &own)]).await, Opened::Open(_)),
        "{own}"
    );
    let by_name = format!("localhost:{port}");
    let origin = format!("http://{by_name}");
    assert!(
        matches!(
            Ws::open(&url, &[("host", &by_name), ("origin", &origin)]).await,
            Opened::Open(_)
        ),
        "reached as {by_name}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_that_break_the_websocket_close_it_with_their_code() {
    let home = TempHome::new();
    let server = Server::start(app(&home, SLOW).await, ServerConfig::loopback(0)).await;
    let url = server.ws_url("session_id=s-broken");
    // A text frame that is not UTF-8: 1007.
    let mut ws = Ws::connect(&url).await;
    ws.send_raw_text(b"{\"type\":\"prompt\",\"text\":\"\xff\xfe\"}".to_vec())
        .await;
    assert_eq!(ws.closed().await, 1007);
    // A message over the limit: 1009.
    let mut ws = Ws::connect(&url).await;
    let text = format!(
        r#"{{"type":"prompt","text":"{}"}}"#,
        "a".repeat(Limits::default().max_frame_bytes)
    );
    ws.send_lenient(&text).await;
    assert_eq!(ws.closed().await, 1009);
    // A continuation with nothing to continue, a data opcode nobody
    // defined: protocol errors, 1002.
    for opcode in [OpData::Continue, OpData::Reserved(3)] {
        let mut ws = Ws::connect(&url).await;
        ws.send_raw(RawFrame::message(b"{}".to_vec(), OpCode::Data(opcode), true))
            .await;
        assert_eq!(ws.closed().await, 1002, "{opcode:?}");
    }
    // Before the close, every frame read earlier is answered.
    let mut ws = Ws::connect(&url).await;
    ws.send_text("not json").await;
    ws.send_text("{}").await;
    ws.send_raw_text(vec![0xc0, 0xaf]).await;
    let code = ws.closed().await;
    assert_eq!(code, 1007);
    let answered: Vec<&str> = ws.seen[1..]
        .iter()
        .map(|f| f["code"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(answered, ["bad_request", "bad_request"]);
    // Binary frames are well-formed frames carrying the wrong thing: an
    // error, and the connection stays.
    let mut ws = Ws::connect(&url).await;
    ws.send_binary(vec![0xff, 0]).await;
    assert_eq!(ws.next().await["code"], "bad_request");
    ws.send(prompt("hello")).await;
    assert_eq!(
        ws.until("agent_end").await.pop().unwrap()["final_message"]["content"],
        "quick"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_activity_lists_both_agents_during_a_delegation_and_peer_sessions_are_read_only() {
    let home = TempHome::new();
    let server = Server::start(app(&home, DELEGATION).await, ServerConfig::loopback(0)).await;
    let mut jarvis = Ws::connect(&server.ws_url("session_id=s-lead")).await;
    // A screen on another session sees the activity too (every open HUD).
    let mut other = Ws::connect(&server.ws_url("session_id=s-elsewhere")).await;
    jarvis.send(prompt("서울 청약 공고 알려 줘")).await;
    let frames = jarvis.until("agent_end").await;
    let activity: Vec<Value> = frames
        .iter()
        .filter(|f| f["type"] == "agent_activity")
        .map(|f| f["active"].clone())
        .collect();
    assert_eq!(
        activity,
        [
            json!(["main"]),
            json!(["main", "karen"]),
            json!(["main"]),
            json!([])
        ],
        "{frames:?}"
    );
    assert_eq!(
        frames.last().unwrap()["final_message"]["content"],
        "KAREN 이 찾았습니다"
    );
    let seen = other
        .until_match(|f| f["type"] == "agent_activity" && f["active"] == json!([]))
        .await;
    assert!(seen.iter().any(|f| f["active"] == json!(["main", "karen"])));
    assert!(
        seen.iter()
            .all(|f| f["type"] == "agent_activity" || f["type"] == "agenda_changed"),
        "only activity (and the AGENDA every screen hears): {seen:?}"
    );

    // The peer session is readable over HTTP-less WebSocket but refuses people.
    let mut peer = Ws::connect(&server.ws_url("session_id=peer-main-karen&agent=main")).await;
    peer.send(prompt("직접 물어볼게")).await;
    let frames: Vec<Value> = peer
        .until_match(|f| f["type"] == "error")
        .await
        .into_iter()
        // Every screen hears `agenda_changed`, whenever the lead's turn's
        // promises are judged: not part of this exchange.
        .filter(|f| f["type"] != "agenda_changed")
        .collect();
    assert_eq!(kinds(&frames), ["input_rejected", "error"], "{frames:?}");
    assert_eq!(frames[1]["code"], "forbidden");
    // Nor may people abort its turns or answer approvals from its screens:
    // those are shown, and answered, on the delegating session's screens.
    for frame in [
        json!({"type": "abort"}),
        json!({"type": "approval", "request_id": "approval_1", "decision": "allow"}),
    ] {
        peer.send(frame).await;
        let answer = peer.until_match(|f| f["type"] == "error").await;
        assert_eq!(answer.last().unwrap()["code"], "forbidden", "{answer:?}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_client_that_stops_reading_is_dropped_and_the_turn_goes_on() {
    let home = TempHome::new();
    let script = format!("fallback: {{ text: \"{}\", chunks: 400 }}", "가".repeat(400));
    let config = ServerConfig::loopback(0).with_limits(Limits {
        outbox_frames: 8,
        ..Limits::default()
    });
    let server = Server::start(app(&home, &script).await, config).await;
    let mut ws = Ws::connect(&server.ws_url("session_id=s-slow")).await;
    // On this one-thread runtime the turn's 400 deltas are queued before the
    // writer runs, so the queue of 8 overflows.
    ws.send(prompt("talk a lot")).await;
    assert_eq!(ws.closed().await, 1008);
    let app = server.state.app().clone();
    eventually(async || {
        let (_, entries) = app.session_entries(&"s-slow".parse().unwrap()).await.unwrap();
        entries
            .iter()
            .any(|e| matches!(e.body, EntryBody::TurnEnd { .. }))
    })
    .await;
    eventually(async || server.state.connection_count() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_aborts_running_turns_closes_sockets_and_removes_the_server_file() {
    let home = TempHome::new();
    let server = Server::start(app(&home, SLOW).await, ServerConfig::loopback(0)).await;
    let mut ws = Ws::connect(&server.ws_url("session_id=s-stop")).await;
    // `serve` writes the file before it answers anything.
    let file = ServerFile::read(&home.0).expect("the server file names the running server");
    assert_eq!(file.url, format!("http://{}", server.addr));
    assert_eq!(file.pid, std::process::id());
    ws.send(prompt("slow")).await;
    ws.until("turn_start").await;
    let app = server.state.app().clone();
    let stopping = tokio::spawn(server.stop());
    let frames = ws.until("agent_end").await;
    assert_eq!(frames.last().unwrap()["final_message"]["stop_reason"], "aborted");
    assert_eq!(ws.closed().await, 1001);
    stopping.await.unwrap().unwrap();
    assert!(ServerFile::read(&home.0).is_none(), "the server file is gone");
    let (_, entries) = app.session_entries(&"s-stop".parse().unwrap()).await.unwrap();
    assert!(
        entries
            .iter()
            .any(|e| matches!(e.body, EntryBody::TurnEnd { .. })),
        "the aborted turn was recorded"
    );
}

#[tokio::test]
async fn a_non_loopback_listener_needs_a_token_and_tls() {
    let home = TempHome::new();
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let state = jarvis_server::ServerState::new(app(&home, SLOW).await, ServerConfig::default());
    let error = jarvis_server::serve(listener, state, std::future::pending())
        .await
        .unwrap_err();
    assert!(matches!(error, jarvis_server::ServeError::InsecureBind { .. }));
    assert!(error.to_string().contains("JARVIS_WEB__TOKEN"), "{error}");
    drop(home);
    // A token alone would cross the network in the clear.
    let home = TempHome::new();
    let app = app_with(&home, SLOW, Some("t")).await;
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let state = jarvis_server::ServerState::new(app.clone(), ServerConfig::default().with_token("t"));
    let error = jarvis_server::serve(listener, state, std::future::pending())
        .await
        .unwrap_err();
    assert!(
        matches!(error, jarvis_server::ServeError::NoTls { .. }),
        "{error}"
    );
    assert!(
        ServerFile::read(&home.0).is_none(),
        "a refused server announces nothing"
    );
    // With a proxy in front that terminates TLS it serves.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let state = jarvis_server::ServerState::new(
        app,
        ServerConfig::default().with_token("t").with_behind_proxy(true),
    );
    jarvis_server::serve(listener, state, async {}).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_session_budget_answers_the_next_prompt_with_budget_exhausted() {
    let home = TempHome::new();
    std::fs::create_dir_all(home.0.join("team")).unwrap();
    std::fs::write(home.0.join("team/main.yaml"), "budget: { session_tokens: 30 }\n").unwrap();
    let script = "fallback: { text: \"first\", usage: { input_tokens: 40, output_tokens: 10 } }\n";
    let server = Server::start(app(&home, script).await, ServerConfig::loopback(0)).await;
    let mut ws = Ws::connect(&server.ws_url("session_id=s-budget&agent=main")).await;
    ws.send(prompt("one")).await;
    let frames = ws.until("agent_end").await;
    let end = frames.last().unwrap();
    assert_eq!(end["final_message"]["content"], "first");
    assert_eq!(end["usage_total"]["input_tokens"], 40);
    assert!(
        end["usage_total"]["cost_usd"].is_null(),
        "no price table: unknown, not zero"
    );
    ws.send(prompt("two")).await;
    let frames = ws.until("error").await;
    let error = frames.last().unwrap();
    assert_eq!(error["code"], "budget_exhausted");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("the session budget of agent main (30 tokens) is spent"),
        "{error}"
    );
    assert!(!kinds(&frames).iter().any(|k| k == "agent_start"), "no turn ran");
}

const FOCUS: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: start_focus, arguments: { title: "이사 준비", plan: ["견적", "계약"] } } ] }
  - when: { agent: main, last_role: tool }
    reply: { text: "시작했습니다" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn focus_changes_stream_and_a_new_socket_opens_with_the_active_task() {
    let home = TempHome::new();
    let server = Server::start(app(&home, FOCUS).await, ServerConfig::loopback(0)).await;
    let url = server.ws_url("session_id=s-focus&agent=main");
    let mut ws = Ws::connect(&url).await;
    ws.send(prompt("이사 준비 시작")).await;
    let frames = ws.until("agent_end").await;
    let state = frames
        .iter()
        .find(|f| f["type"] == "focus_state")
        .expect("focus_state while the tool runs");
    assert_eq!(state["task_id"], "f-1");
    assert_eq!(state["title"], "이사 준비");
    assert_eq!(
        state["steps"],
        json!([{"title": "견적", "status": "active"}, {"title": "계약", "status": "pending"}])
    );
    assert_eq!(
        (
            state["current"].clone(),
            state["state"].clone(),
            state["busy"].clone()
        ),
        (json!(0), json!("active"), json!(true))
    );
    let panel = frames
        .iter()
        .find(|f| f["type"] == "focus_panel")
        .expect("focus_panel");
    assert_eq!(panel["area"], "focus");
    assert!(panel["markdown"].as_str().unwrap().contains("견적"), "{panel}");

    // Another screen opening the session gets the task first, idle.
    let mut other = Ws::connect(&url).await;
    let opened = other.until("focus_panel").await;
    let state = opened.iter().find(|f| f["type"] == "focus_state").unwrap();
    assert_eq!(
        (state["task_id"].clone(), state["busy"].clone()),
        (json!("f-1"), json!(false))
    );
    // A session without a task opens without one.
    let mut plain = Ws::connect(&server.ws_url("session_id=s-plain&agent=main")).await;
    plain.send(json!({"type": "ping"})).await;
    let first = plain.until("error").await;
    assert!(first.iter().all(|f| f["type"] != "focus_state"), "{first:?}");
}
