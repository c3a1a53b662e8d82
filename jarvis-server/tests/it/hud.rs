//! The HUD in a real headless Chromium (see [`crate::browser`]): streaming,
//! switching agents, the colour blend, two agents working together, the
//! approval dialog on two screens, inert model output, the panels, the
//! session's tokens and cost in the bar, the keyboard, a phone-sized
//! screen with reduced motion, a sub-agent's work folded under its tool
//! call, and the frame time.
//! Each test skips with a loud line when Chromium is missing, unless
//! `JARVIS_REQUIRE_BROWSER=1`. Screenshots go to `target/hud-artifacts/`.

use fantoccini::Locator;
use fantoccini::actions::{
    InputSource, KeyAction, KeyActions, MOUSE_BUTTON_LEFT, MouseActions, PointerAction,
};
use fantoccini::key::Key;
use futures::StreamExt;
use jarvis_pack_housing::HousingPack;
use jarvis_sdk::agent::{AgentEvent, NewSession, OpenLoop, UIAdapter};
use jarvis_sdk::model::{ChatRequest, FauxProvider, Provider, ProviderStream};
use jarvis_server::ServerConfig;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

use crate::browser::{Browser, BrowserOptions};
use crate::mcp::Mcp;
use crate::support::{Server, TempHome, app_on, eventually};
use crate::ws::{APPROVAL, DELEGATION};

/// J.A.R.V.I.S.'s and K.A.R.E.N.'s primary colours as the page computes them.
const CYAN: [u8; 3] = [0x5f, 0xc8, 0xe2];
const GREEN: [u8; 3] = [0x97, 0xbc, 0x62];

fn rgb(c: [u8; 3]) -> String {
    format!("rgb({}, {}, {})", c[0], c[1], c[2])
}

/// A server for one browser test, on `provider`.
struct Hud {
    server: Server,
    home: TempHome,
}

impl Hud {
    async fn start(provider: Arc<dyn Provider>) -> Hud {
        Hud::start_in(TempHome::new(), provider).await
    }

    async fn start_in(home: TempHome, provider: Arc<dyn Provider>) -> Hud {
        let app = app_on(&home, provider, None).await;
        let server = Server::start(app, ServerConfig::loopback(0)).await;
        Hud { server, home }
    }

    /// A server whose team is J.A.R.V.I.S. alone: its team directory
    /// exists and is empty, so K.A.R.E.N. is not seeded.
    async fn alone() -> Hud {
        let home = TempHome::new();
        std::fs::create_dir_all(home.0.join("team")).unwrap();
        let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: ok }").unwrap());
        Hud::start_in(home, faux).await
    }

    async fn faux(script: &str) -> Hud {
        Hud::start(Arc::new(FauxProvider::from_yaml(script).unwrap())).await
    }

    fn url(&self, query: &str) -> String {
        format!("http://{}/?{query}", self.server.addr)
    }

    fn app(&self) -> &jarvis_sdk::app::AppAssembly {
        self.server.state.app()
    }

    /// Pushes `event` to every screen of session `id` (and the app's observers).
    async fn emit(&self, id: &str, event: Value) {
        let session = self.app().session(&id.parse().unwrap()).await.unwrap();
        let event: AgentEvent = serde_json::from_value(event).unwrap();
        let _ = session.screens().on_event(&event);
    }
}

/// The browser (`None`: skipped) and a server on `script`, with the HUD
/// open at `/?{query}`.
async fn open(test: &str, script: &str, query: &str) -> Option<(Browser, Hud)> {
    let browser = Browser::start(test, BrowserOptions::default()).await?;
    let hud = Hud::faux(script).await;
    browser.open_hud(&hud.url(query)).await;
    Some((browser, hud))
}

/// A faux model whose calls for agent `held` wait until [`Gated::open`]:
/// the test decides how long that agent works.
#[derive(Debug)]
struct Gated {
    inner: FauxProvider,
    held: &'static str,
    gate: watch::Sender<bool>,
}

impl Gated {
    fn new(script: &str, held: &'static str) -> Arc<Self> {
        Arc::new(Self {
            inner: FauxProvider::from_yaml(script).unwrap(),
            held,
            gate: watch::Sender::new(false),
        })
    }

    fn open(&self) {
        self.gate.send_replace(true);
    }
}

impl Provider for Gated {
    fn stream(&self, request: ChatRequest) -> ProviderStream {
        if request.metadata.agent_id != self.held {
            return self.inner.stream(request);
        }
        let mut gate = self.gate.subscribe();
        let answer = self.inner.stream(request);
        Box::pin(
            futures::stream::once(async move {
                let _ = gate.wait_for(|open| *open).await;
                answer
            })
            .flatten(),
        )
    }

    fn name(&self) -> &str {
        "faux"
    }
}

/// Counts the orb's opaque pixels near each of two colours (by hue and
/// saturation, whatever their brightness).
const COUNT_COLOURS: &str = r#"
    const [a, b] = arguments;
    const canvas = document.getElementById('orb');
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    const norm = (c) => { const m = Math.max(c[0], c[1], c[2]); return [c[0] / m, c[1] / m, c[2] / m]; };
    const na = norm(a), nb = norm(b);
    const near = (p, q) => Math.abs(p[0] - q[0]) < 0.08 && Math.abs(p[1] - q[1]) < 0.08 && Math.abs(p[2] - q[2]) < 0.08;
    let ca = 0, cb = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i + 3] < 250) continue;
      const m = Math.max(data[i], data[i + 1], data[i + 2]);
      if (m < 60) continue;
      const p = [data[i] / m, data[i + 1] / m, data[i + 2] / m];
      if (near(p, na)) ca++; else if (near(p, nb)) cb++;
    }
    return [ca, cb];
"#;

async fn orb_colours(browser: &Browser) -> (u64, u64) {
    let v = browser.js(COUNT_COLOURS, vec![json!(CYAN), json!(GREEN)]).await;
    (v[0].as_u64().unwrap(), v[1].as_u64().unwrap())
}

/// Polls the orb's colours until `done` holds for (cyan, green) pixels.
async fn wait_orb(browser: &Browser, what: &str, done: impl Fn(u64, u64) -> bool) -> (u64, u64) {
    let deadline = std::time::Instant::now() + crate::browser::PAGE_WAIT;
    loop {
        let (cyan, green) = orb_colours(browser).await;
        if done(cyan, green) {
            return (cyan, green);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}: cyan {cyan}, green {green} pixels"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

async fn prompt(browser: &Browser, words: &str) {
    let c = &browser.client;
    c.find(Locator::Css("#prompt"))
        .await
        .unwrap()
        .send_keys(words)
        .await
        .unwrap();
    c.find(Locator::Css("#send"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// Clicks the element `css` finds. Lists re-render when sessions change (a
/// turn's end, activity), so an element found may be replaced before the
/// click lands: then it is found again.
async fn click(browser: &Browser, css: &str) {
    let mut attempts = 0;
    loop {
        let element = browser.client.find(Locator::Css(css)).await.unwrap();
        match element.click().await {
            Ok(_) => return,
            Err(fantoccini::error::CmdError::Standard(e))
                if e.error == fantoccini::error::ErrorStatus::StaleElementReference && attempts < 20 =>
            {
                attempts += 1;
            }
            Err(e) => panic!("clicking {css}: {e}"),
        }
    }
}

/// Drags the orb sideways by `dx` CSS pixels in a few moves.
async fn drag_orb(browser: &Browser, dx: f64) {
    let orb = browser.client.find(Locator::Css("#orb")).await.unwrap();
    let step = dx / 4.0;
    let mut mouse = MouseActions::new("mouse".into())
        .then(PointerAction::MoveToElement {
            element: orb,
            duration: None,
            x: 0.0,
            y: 0.0,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        });
    for _ in 0..4 {
        mouse = mouse.then(PointerAction::MoveBy {
            duration: Some(Duration::from_millis(40)),
            x: step,
            y: 0.0,
        });
    }
    mouse = mouse.then(PointerAction::Up {
        button: MOUSE_BUTTON_LEFT,
    });
    browser.client.perform_actions(mouse).await.unwrap();
}

/// Presses `key` where the focus is.
async fn press(browser: &Browser, key: Key) {
    let keys = KeyActions::new("keyboard".into())
        .then(KeyAction::Down { value: key.into() })
        .then(KeyAction::Up { value: key.into() });
    browser.client.perform_actions(keys).await.unwrap();
}

/// Waits until the HUD wears agent `agent` on a ready session other than
/// `not`, and answers that session's id.
async fn wait_attached(browser: &Browser, agent: &str, wordmark: &str, not: &str) -> String {
    let v = browser
        .wait_js(
            &format!("the HUD moves to {agent}"),
            "const d = document.documentElement.dataset;
             return [d.agent, document.getElementById('wordmark').textContent, d.session,
                     /^(ready|read-only)/.test(document.getElementById('status').textContent)];",
            |v| v[0] == agent && v[1] == wordmark && v[2].as_str().is_some_and(|s| s != not) && v[3] == true,
        )
        .await;
    text(&v[2]).to_owned()
}

const STREAM: &str = r#"
fallback: { thinking: "Weighing the words.", text: "Alpha Bravo Charlie Delta", chunks: 4, chunk_delay_ms: 700 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_text_shows_before_the_last_chunk_arrives() {
    let Some((browser, _hud)) = open(
        "streamed_text_shows_before_the_last_chunk_arrives",
        STREAM,
        "session=default-main&agent=main",
    )
    .await
    else {
        return;
    };
    let identity = browser
        .js(
            "return [document.getElementById('wordmark').textContent, document.getElementById('quote').textContent,
                     document.getElementById('next-agent').hidden, document.title]",
            vec![],
        )
        .await;
    assert_eq!(identity[0], "J.A.R.V.I.S.");
    assert!(!text(&identity[1]).is_empty(), "the quote is shown: {identity}");
    assert_eq!(identity[2], false, "two agents: the arrows show");
    assert_eq!(identity[3], "J.A.R.V.I.S.");
    // The orb is drawn in the agent's colour.
    let (_, green) = wait_orb(&browser, "the orb is drawn in cyan", |cyan, _| cyan > 200).await;
    assert_eq!(green, 0, "only the agent's colour");

    prompt(&browser, "hello there").await;
    let partial = browser
        .wait_js(
            "part of the answer shows",
            "const t = document.querySelector('#log .agent-turn .text'); return t ? t.textContent : ''",
            |v| !text(v).is_empty(),
        )
        .await;
    let partial = text(&partial).to_owned();
    assert!(partial.starts_with("Alpha"), "{partial}");
    assert!(
        !partial.contains("Delta"),
        "seen before the last chunk: {partial}"
    );
    browser.screenshot("streaming").await;
    browser
        .wait_js(
            "the whole answer shows",
            "return document.querySelector('#log .agent-turn .text').textContent",
            |v| v == "Alpha Bravo Charlie Delta",
        )
        .await;
    let shown = browser
        .js(
            "const th = document.querySelector('#log details.thinking');
             return [document.querySelector('#log .you').textContent, th.textContent, th.open,
                     th.querySelector('summary').textContent]",
            vec![],
        )
        .await;
    assert_eq!(shown[0], "hello there");
    assert!(text(&shown[1]).contains("Weighing the words."), "{shown}");
    assert_eq!(shown[2], false, "thinking folds away once the answer comes");
    browser.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_switch_by_arrow_drag_and_keys_to_their_top_session_and_the_screen_blends_in_0_9_s() {
    let Some((browser, hud)) = open(
        "agents_switch_by_arrow_drag_and_keys",
        "fallback: { text: ok }",
        "session=default-main&agent=main",
    )
    .await
    else {
        return;
    };
    let arrows = browser
        .js(
            "return [document.getElementById('prev-agent').getAttribute('aria-label'),
                     document.getElementById('next-agent').getAttribute('aria-label'),
                     getComputedStyle(document.documentElement).transitionDuration]",
            vec![],
        )
        .await;
    assert_eq!(arrows[0], "Previous agent: K.A.R.E.N.");
    assert_eq!(arrows[1], "Next agent: K.A.R.E.N.");
    assert!(text(&arrows[2]).split(", ").all(|d| d == "0.9s"), "{arrows}");

    // Watch the wordmark's colour from the click until it is K.A.R.E.N.'s.
    browser
        .js(
            "const target = arguments[0];
             const w = document.getElementById('wordmark');
             const start = getComputedStyle(w).color;
             window.__blend = null;
             let clicked = null, changed = null;
             document.getElementById('next-agent').addEventListener('click', () => { clicked = performance.now(); }, { once: true });
             function step(t) {
               const c = getComputedStyle(w).color;
               if (clicked !== null && changed === null && c !== start) changed = t;
               if (clicked !== null && c === target) { window.__blend = { clicked, changed, done: t }; return; }
               requestAnimationFrame(step);
             }
             requestAnimationFrame(step);",
            vec![json!(rgb(GREEN))],
        )
        .await;
    // No K.A.R.E.N. session yet: the arrow makes one.
    click(&browser, "#next-agent").await;
    let fresh = wait_attached(&browser, "karen", "K.A.R.E.N.", "default-main").await;
    let blend = browser
        .wait_js("the colour blend ends", "return window.__blend", |v| !v.is_null())
        .await;
    let took = blend["done"].as_f64().unwrap() - blend["clicked"].as_f64().unwrap();
    println!("hud colour blend: {took:.0} ms from the click to K.A.R.E.N.'s colour (CSS: 0.9s)");
    assert!((600.0..2500.0).contains(&took), "the blend took {took} ms");
    let sessions = hud.app().list_sessions().await.unwrap();
    let made = sessions
        .iter()
        .find(|s| s.id.as_str() == fresh)
        .expect("the new session is stored");
    assert_eq!((made.agent_id.as_str(), made.kind.as_str()), ("karen", "user"));

    // A drag shorter than 48 px switches nothing.
    drag_orb(&browser, -30.0).await;
    let still = browser
        .js("return document.documentElement.dataset.agent", vec![])
        .await;
    assert_eq!(still, "karen");
    // Dragging left goes to the next agent, wrapping around to J.A.R.V.I.S.
    drag_orb(&browser, -120.0).await;
    assert_eq!(
        wait_attached(&browser, "main", "J.A.R.V.I.S.", &fresh).await,
        "default-main"
    );

    // A newer K.A.R.E.N. session, and a scheduled job's session and a peer
    // session newer still: neither of those is ever a switch target.
    let newer = hud.app().create_session(Some("karen")).await.unwrap();
    let store = hud.app().store();
    let mut sched = store
        .create(NewSession::user("sched-karen-weekly".parse().unwrap(), "karen"))
        .await
        .unwrap();
    // Strictly newer than `newer` (the list breaks ties by id): touch it
    // until the clock has moved on.
    while sched.updated_at <= newer.updated_at {
        sched = store.set_title(&sched.id, Some("weekly".into())).await.unwrap();
    }
    hud.app()
        .store()
        .create(NewSession::peer(
            "peer-main-karen".parse().unwrap(),
            "main",
            "karen",
        ))
        .await
        .unwrap();
    drag_orb(&browser, 120.0).await;
    assert_eq!(
        wait_attached(&browser, "karen", "K.A.R.E.N.", "default-main").await,
        newer.id.as_str()
    );
    click(&browser, "#prev-agent").await;
    assert_eq!(
        wait_attached(&browser, "main", "J.A.R.V.I.S.", newer.id.as_str()).await,
        "default-main"
    );

    // The keyboard: the arrow keys on the focused orb.
    browser.js("document.getElementById('orb').focus()", vec![]).await;
    press(&browser, Key::Right).await;
    assert_eq!(
        wait_attached(&browser, "karen", "K.A.R.E.N.", "default-main").await,
        newer.id.as_str()
    );

    // With one agent there is nothing to switch to: no arrows, and a drag
    // or an arrow key changes nothing.
    let alone = Hud::alone().await;
    assert_eq!(alone.app().registry().agents().len(), 1);
    browser
        .open_hud(&alone.url("session=default-main&agent=main"))
        .await;
    let arrows = "return [document.getElementById('prev-agent').hidden,
                          document.getElementById('next-agent').hidden, document.documentElement.dataset.agent]";
    assert_eq!(browser.js(arrows, vec![]).await, json!([true, true, "main"]));
    drag_orb(&browser, -120.0).await;
    browser.js("document.getElementById('orb').focus()", vec![]).await;
    press(&browser, Key::Right).await;
    assert_eq!(browser.js(arrows, vec![]).await, json!([true, true, "main"]));
    browser.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_working_agents_fill_the_orb_with_both_colours_and_pulse_the_arrow() {
    let Some(browser) = Browser::start("two_working_agents_fill_the_orb", BrowserOptions::default()).await
    else {
        return;
    };
    let model = Gated::new(DELEGATION, "karen");
    let hud = Hud::start(model.clone()).await;
    for (id, agent, words) in [
        ("l-1", "main", "Send the quarterly report on Friday"),
        ("l-2", "karen", "Tell me when the SH notice for Mapo is out"),
    ] {
        hud.app()
            .open_loops()
            .open(open_loop(id, "default-main", agent, words))
            .await
            .unwrap();
    }
    browser
        .open_hud(&hud.url("session=default-main&agent=main"))
        .await;
    prompt(&browser, "Ask KAREN for the Seoul notices").await;
    browser.wait_active("main karen").await;
    wait_orb(&browser, "the orb holds both colours", |cyan, green| {
        cyan > 100 && green > 100
    })
    .await;
    let pulse = browser
        .js(
            "return [document.getElementById('next-agent').classList.contains('pulse'),
                     getComputedStyle(document.getElementById('next-agent')).animationName]",
            vec![],
        )
        .await;
    assert_eq!(
        pulse,
        json!([true, "arrow-pulse"]),
        "the arrow toward K.A.R.E.N. pulses"
    );
    // The delegation's peer session is listed with K.A.R.E.N.'s marker.
    let marker = browser
        .wait_js(
            "the peer session is listed",
            "const b = document.querySelector('#session-list button[data-session=\"peer-main-karen\"]');
             return b ? [getComputedStyle(b.querySelector('.marker')).backgroundColor, b.textContent] : null",
            |v| !v.is_null(),
        )
        .await;
    assert_eq!(marker[0], rgb(GREEN));
    assert!(text(&marker[1]).contains("PEER"), "{marker}");
    browser
        .wait_js(
            "the AGENDA shows both agents' promises",
            "return document.querySelectorAll('#agenda-list li[data-kind=\"promise\"]').length",
            |v| v == 2,
        )
        .await;
    let shot = browser.screenshot("two-agents").await;
    println!("two agents working together: {}", shot.display());

    // K.A.R.E.N. answers; the work ends and the orb is J.A.R.V.I.S.'s again.
    model.open();
    browser
        .wait_js(
            "the answer arrives",
            "return [...document.querySelectorAll('#log .agent-turn .text')].map(t => t.textContent).join('|')",
            |v| text(v).contains("KAREN 이 찾았습니다"),
        )
        .await;
    browser.wait_active("").await;
    wait_orb(&browser, "the orb is cyan only again", |cyan, green| {
        cyan > 100 && green == 0
    })
    .await;
    let pulse = browser
        .js(
            "return document.getElementById('next-agent').classList.contains('pulse')",
            vec![],
        )
        .await;
    assert_eq!(pulse, false);

    // The peer session opens read-only, in K.A.R.E.N.'s colours.
    click(&browser, "#session-list button[data-session=\"peer-main-karen\"]").await;
    wait_attached(&browser, "karen", "K.A.R.E.N.", "default-main").await;
    let peer = browser
        .wait_js(
            "the peer conversation shows",
            "return [document.getElementById('prompt').disabled, document.getElementById('send').disabled,
                     document.getElementById('log').textContent]",
            |v| text(&v[2]).contains("찾았습니다"),
        )
        .await;
    assert_eq!(
        (&peer[0], &peer[1]),
        (&json!(true), &json!(true)),
        "read-only: {peer}"
    );
    browser.finish().await;
}

const DIALOG: &str = "const d = document.getElementById('approval');
    return [d.open, d.textContent.includes('write_file'), d.textContent.includes('a.txt')]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_shows_on_two_screens_and_one_answer_closes_both() {
    let Some(browser) = Browser::start("an_approval_shows_on_two_screens", BrowserOptions::default()).await
    else {
        return;
    };
    let hud = Hud::faux(APPROVAL).await;
    let url = hud.url("session=s-shared&agent=main");
    let c = &browser.client;
    browser.open_hud(&url).await;
    let first = c.window().await.unwrap();
    let second = c.new_window(false).await.unwrap().handle;
    c.switch_to_window(second.clone()).await.unwrap();
    browser.open_hud(&url).await;
    prompt(&browser, "write the file").await;
    browser
        .wait_js("the second screen asks", DIALOG, |v| {
            v == &json!([true, true, true])
        })
        .await;
    c.switch_to_window(first.clone()).await.unwrap();
    browser
        .wait_js("the first screen asks too", DIALOG, |v| {
            v == &json!([true, true, true])
        })
        .await;
    browser.screenshot("approval").await;
    click(&browser, "#approval button[data-decision=\"allow\"]").await;
    browser
        .wait_js("the first screen's dialog closes", DIALOG, |v| v[0] == false)
        .await;
    c.switch_to_window(second).await.unwrap();
    browser
        .wait_js("the second screen's dialog closes", DIALOG, |v| v[0] == false)
        .await;
    browser
        .wait_js(
            "the turn goes on",
            "return document.getElementById('log').textContent",
            |v| text(v).contains("written"),
        )
        .await;
    let file = hud.home.0.join("sandboxes/s-shared/a.txt");
    assert_eq!(std::fs::read_to_string(file).unwrap(), "x");
    browser.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_clients_session_is_listed_read_only_and_its_approval_is_answered_on_the_hud() {
    let Some(browser) = Browser::start(
        "an_mcp_clients_session_is_listed_read_only",
        BrowserOptions::default(),
    )
    .await
    else {
        return;
    };
    let hud = Hud::faux(APPROVAL).await;
    let mut client = Mcp::new(&hud.server, None);
    client.initialize().await;
    let call = tokio::spawn(async move {
        client
            .request(
                "tools/call",
                json!({"name": "ask_main", "arguments": {"request": "write the file"}}),
            )
            .await
    });
    let app = hud.app().clone();
    eventually(async || {
        app.list_sessions()
            .await
            .unwrap()
            .iter()
            .any(|s| s.id.as_str() == "mcp-main-1")
    })
    .await;
    browser.open_hud(&hud.url("session=mcp-main-1")).await;
    let listed = browser
        .wait_js(
            "the MCP session is listed with its tag",
            "const b = document.querySelector('#session-list button[data-session=\"mcp-main-1\"]');
             return b ? b.textContent : null",
            |v| !v.is_null(),
        )
        .await;
    assert!(text(&listed).contains("MCP"), "{listed}");
    let state = browser
        .wait_js(
            "the session opens read-only and asks",
            "const d = document.getElementById('approval');
             return [document.getElementById('prompt').disabled, d.open, d.textContent.includes('write_file')]",
            |v| v[1] == true,
        )
        .await;
    assert_eq!(state, json!([true, true, true]));
    browser.screenshot("mcp-approval").await;
    click(&browser, "#approval button[data-decision=\"allow\"]").await;
    browser
        .wait_js("the dialog closes", DIALOG, |v| v[0] == false)
        .await;
    let answer = tokio::time::timeout(crate::support::WAIT, call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "written", "{answer}");
    browser.finish().await;
}

const PAYLOAD: &str =
    r#"<script>window.__pwned = 'script'</script><img src=x onerror="window.__pwned = 'img'">"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_in_model_output_stays_inert_text() {
    let quoted = serde_json::to_string(PAYLOAD).unwrap();
    let script = format!(
        r#"
rules:
  - when: {{ agent: main, last_role: user }}
    reply: {{ thinking: {quoted}, tool_calls: [ {{ name: read_file, arguments: {{ path: {quoted} }} }} ] }}
  - when: {{ agent: main, last_role: tool }}
    reply: {{ text: {quoted}, chunks: 5 }}
"#
    );
    let Some((browser, hud)) = open(
        "markup_in_model_output_stays_inert_text",
        &script,
        "session=s-inert&agent=main",
    )
    .await
    else {
        return;
    };
    prompt(&browser, "show me").await;
    browser
        .wait_js(
            "the answer is in",
            "return document.documentElement.dataset.busy === 'false' && document.querySelectorAll('#log .agent-turn .text').length",
            |v| v == 1,
        )
        .await;
    hud.emit(
        "s-inert",
        json!({"type": "proactive_message", "text": PAYLOAD, "kind": "proactive", "message_id": "m-1"}),
    )
    .await;
    hud.emit(
        "s-inert",
        json!({"type": "inner_thought", "interpretation": PAYLOAD, "decision": PAYLOAD, "confidence": 0.5, "frame": {}}),
    )
    .await;
    hud.emit("s-inert", json!({"type": "agent_error", "message": PAYLOAD}))
        .await;
    let check = "const log = document.getElementById('log');
        return [typeof window.__pwned, document.querySelectorAll('#log img, #log script').length,
                document.querySelectorAll('img').length,
                log.textContent.split('<img src=x onerror=').length - 1]";
    let seen = browser
        .wait_js("every payload is shown", check, |v| v[3].as_u64() >= Some(6))
        .await;
    assert_eq!(
        seen,
        json!(["undefined", 0, 0, seen[3]]),
        "nothing ran and no element was made"
    );
    // The recorded history is drawn the same way.
    browser.open_hud(&hud.url("session=s-inert&agent=main")).await;
    let seen = browser
        .wait_js("the history shows the payloads", check, |v| {
            v[3].as_u64() >= Some(3)
        })
        .await;
    assert_eq!(
        (&seen[0], &seen[1], &seen[2]),
        (&json!("undefined"), &json!(0), &json!(0)),
        "{seen}"
    );
    browser.finish().await;
}

const TOOLS: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { thinking: "Let me look.", tool_calls: [ { name: read_file, arguments: { path: "missing.txt" } } ] }
  - when: { agent: main, last_role: tool }
    reply: { text: "There is no such file." }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thoughts_tools_proactive_messages_and_errors_each_show_as_what_they_are() {
    let Some((browser, hud)) = open(
        "thoughts_tools_proactive_messages_and_errors",
        TOOLS,
        "session=s-talk&agent=main",
    )
    .await
    else {
        return;
    };
    prompt(&browser, "read it").await;
    let tool = browser
        .wait_js(
            "the failed tool call shows",
            "const t = document.querySelector('#log details.tool');
             return t && document.documentElement.dataset.busy === 'false'
               ? [t.classList.contains('failed'), t.open, t.querySelector('.name').textContent,
                  t.querySelector('.args').textContent, t.querySelector('.state').textContent,
                  t.querySelector('.result').textContent.length > 0,
                  document.querySelector('#log details.thinking').open]
               : null",
            |v| !v.is_null(),
        )
        .await;
    assert_eq!(tool[0], true, "{tool}");
    assert_eq!(tool[1], true, "a failed call opens to show its error");
    assert_eq!(tool[2], "read_file");
    assert!(text(&tool[3]).contains("missing.txt"), "{tool}");
    assert_eq!(tool[4], "failed");
    assert_eq!(tool[5], true);
    assert_eq!(tool[6], false, "thinking is folded");

    hud.emit(
        "s-talk",
        json!({"type": "inner_thought", "interpretation": "They want the file.", "decision": "Say it is missing.",
               "confidence": 0.8, "frame": {}}),
    )
    .await;
    // A promise falls due: the reflection daemon sends a real proactive message.
    let app = hud.app().clone();
    let now = jarvis_sdk::common::Timestamp::from_system_time(std::time::SystemTime::now());
    let mut due = open_loop("l-due", "s-talk", "main", "The notice is out.");
    due.due = Some(jarvis_sdk::common::Timestamp::from_millis(now.as_millis() - 1000));
    app.open_loops().open(due).await.unwrap();
    // The server's own daemon may get there first; either way it shows once
    // a tick finds the session idle.
    let deadline = std::time::Instant::now() + crate::browser::PAGE_WAIT;
    let reminder = "return document.querySelector('#log .proactive.proactive-kind') !== null";
    while browser.js(reminder, vec![]).await != true {
        assert!(std::time::Instant::now() < deadline, "the reminder never showed");
        app.proactive().tick().await;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for (kind, words) in [("filler", "One moment."), ("answer", "KAREN found it.")] {
        hud.emit(
            "s-talk",
            json!({"type": "proactive_message", "text": words, "kind": kind, "message_id": format!("m-{kind}")}),
        )
        .await;
    }
    hud.emit(
        "s-talk",
        json!({"type": "agent_error", "message": "The model is overloaded."}),
    )
    .await;
    let shown = browser
        .wait_js(
            "the asides show",
            "const q = (s) => document.querySelector(s);
             return q('#log .error-line') ? [q('#log .thought').textContent, q('#log .proactive.filler').textContent,
                     q('#log .proactive.proactive-kind').textContent, q('#log .proactive.answer').textContent,
                     q('#log .error-line').textContent] : null",
            |v| !v.is_null(),
        )
        .await;
    assert!(
        text(&shown[0]).contains("They want the file.") && text(&shown[0]).contains("80%"),
        "{shown}"
    );
    assert!(text(&shown[1]).contains("One moment."), "{shown}");
    assert!(text(&shown[2]).contains("The notice is out."), "{shown}");
    assert!(text(&shown[3]).contains("KAREN found it."), "{shown}");
    assert_eq!(shown[4], "The model is overloaded.");
    browser.screenshot("conversation").await;

    // Dismissing a message tells the agent's feedback learner.
    let before = app.registry().main().feedback.propensity();
    click(&browser, "#log .proactive.proactive-kind .dismiss").await;
    browser
        .wait_js(
            "the message goes away",
            "return document.querySelector('#log .proactive.proactive-kind') === null",
            |v| v == true,
        )
        .await;
    eventually(async || app.registry().main().feedback.propensity() < before).await;
    browser.finish().await;
}

fn open_loop(id: &str, session: &str, agent: &str, words: &str) -> OpenLoop {
    serde_json::from_value(json!({
        "id": id, "session_id": session, "agent_id": agent, "text": words, "kind": "promise",
        "created_at": "2026-11-29T09:00:00Z"
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panels_list_sessions_and_the_agenda_in_agent_colours_and_set_shows_the_current_tools() {
    let Some(browser) =
        Browser::start("panels_list_sessions_and_the_agenda", BrowserOptions::default()).await
    else {
        return;
    };
    // A weekly job of J.A.R.V.I.S.'s, so the AGENDA has a schedule too.
    let home = TempHome::new();
    std::fs::create_dir_all(home.0.join("schedules")).unwrap();
    std::fs::write(
        home.0.join("schedules/weekly-report.yaml"),
        "agent: main\nprompt: Summarise the week\ncron: \"0 9 * * mon\"\n",
    )
    .unwrap();
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: ok }").unwrap());
    let hud = Hud::start_in(home, faux).await;
    let app = hud.app();
    let karen = app.create_session(Some("karen")).await.unwrap();
    app.open_loops()
        .open(open_loop(
            "l-1",
            "default-main",
            "main",
            "Send the report on Friday",
        ))
        .await
        .unwrap();
    app.open_loops()
        .open(open_loop(
            "l-2",
            karen.id.as_str(),
            "karen",
            "Tell me when the SH notice is out",
        ))
        .await
        .unwrap();
    browser
        .open_hud(&hud.url("session=default-main&agent=main"))
        .await;
    let labels = browser
        .wait_js(
            "the AGENDA lists both promises",
            "return [...document.querySelectorAll('#agenda-list li[data-kind=\"promise\"]')].map(li =>
                [li.dataset.agent, li.querySelector('.agenda-label').textContent,
                 getComputedStyle(li.querySelector('.agenda-label')).color])",
            |v| v.as_array().is_some_and(|a| a.len() == 2),
        )
        .await;
    let mut labels: Vec<Value> = labels.as_array().unwrap().clone();
    labels.sort_by_key(|l| l[0].as_str().unwrap_or_default().to_owned());
    assert_eq!(
        labels,
        [
            json!(["karen", "K.A.R.E.N.", rgb(GREEN)]),
            json!(["main", "J.A.R.V.I.S.", rgb(CYAN)])
        ]
    );
    let schedule = browser
        .js(
            "const li = [...document.querySelectorAll('#agenda-list li[data-kind=\"schedule\"]')]
                .find(li => li.textContent.includes('Summarise the week'));
             return li ? [li.dataset.agent, li.querySelector('.agenda-label').textContent,
                          getComputedStyle(li.querySelector('.agenda-label')).color,
                          li.querySelector('.agenda-kind').textContent] : null",
            vec![],
        )
        .await;
    assert_eq!(schedule, json!(["main", "J.A.R.V.I.S.", rgb(CYAN), "SCHEDULE"]));
    // `agenda_changed` refreshes the card.
    app.open_loops()
        .open(open_loop("l-3", "default-main", "main", "Call the bank"))
        .await
        .unwrap();
    hud.emit(
        "default-main",
        json!({"type": "agenda_changed", "session_id": "default-main"}),
    )
    .await;
    browser
        .wait_js(
            "the AGENDA refreshes",
            "return document.querySelectorAll('#agenda-list li[data-kind=\"promise\"]').length",
            |v| v == 3,
        )
        .await;

    // Session markers in each agent's colour.
    let markers = browser
        .wait_js(
            "both sessions are listed",
            "return [...document.querySelectorAll('#session-list button')].map(b =>
                [b.dataset.agent, getComputedStyle(b.querySelector('.marker')).backgroundColor])",
            |v| v.as_array().is_some_and(|a| a.len() == 2),
        )
        .await;
    for marker in markers.as_array().unwrap() {
        let want = if marker[0] == "karen" {
            rgb(GREEN)
        } else {
            rgb(CYAN)
        };
        assert_eq!(marker[1], want, "{markers}");
    }

    // SET: the SYSTEM card lists the current agent's tools, and only those.
    let agents = app.registry();
    let tools_of = |id: &str| {
        let mut tools = agents.get(id).unwrap().tools.clone();
        tools.sort();
        json!(tools)
    };
    let listed = "return [...document.querySelectorAll('#tools li')].map(li => li.textContent).sort()";
    click(&browser, "#open-set").await;
    browser
        .wait_js("SET opens", "return document.getElementById('set').open", |v| {
            v == true
        })
        .await;
    assert_eq!(browser.js(listed, vec![]).await, tools_of("main"));
    // ... and names the embedder of recall (`GET /api/system`).
    browser
        .wait_js(
            "SET names the embedder",
            "const dt = [...document.querySelectorAll('#system dt')].find(d => d.textContent === 'Embed');
             return dt ? dt.nextElementSibling.textContent : null",
            |v| v == "hash · hash-v1-512",
        )
        .await;
    browser.screenshot("set").await;
    click(&browser, "#close-set").await;
    click(
        &browser,
        &format!("#session-list button[data-session=\"{}\"]", karen.id),
    )
    .await;
    wait_attached(&browser, "karen", "K.A.R.E.N.", "default-main").await;
    click(&browser, "#open-set").await;
    let karen_tools = browser.js(listed, vec![]).await;
    assert_eq!(karen_tools, tools_of("karen"));
    assert!(karen_tools.as_array().unwrap().contains(&json!("sh_notice")));
    assert!(!tools_of("main").as_array().unwrap().contains(&json!("sh_notice")));
    press(&browser, Key::Escape).await;
    browser
        .wait_js(
            "Escape closes SET",
            "return document.getElementById('set').open",
            |v| v == false,
        )
        .await;
    browser.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demos_note_is_said_once_and_scrolls_with_the_conversation() {
    let options = BrowserOptions {
        phone: Some((375, 640)),
        ..BrowserOptions::default()
    };
    let Some(browser) = Browser::start("the_demos_note_is_said_once", options).await else {
        return;
    };
    // No provider: the offline demo plays (a config built in code looks
    // for no local model).
    let home = TempHome::new();
    let mut config = jarvis_sdk::app::AppConfig::for_home(&home.0);
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    let app = jarvis_sdk::app::build_app(config).await.unwrap();
    assert!(app.is_demo());
    let server = Server::start(app, ServerConfig::loopback(0)).await;
    browser
        .open_hud(&format!(
            "http://{}/?session=default-main&agent=main",
            server.addr
        ))
        .await;
    let said = browser
        .js(
            "const text = document.body.innerText;
             return [text.split('offline demo').length - 1, document.querySelectorAll('#notice').length,
                     document.getElementById('log').firstElementChild.id]",
            vec![],
        )
        .await;
    assert_eq!(
        said,
        json!([1, 1, "notice"]),
        "said once, as the log's first entry"
    );
    for words in ["hello", "도구 써 봐", "hello again"] {
        prompt(&browser, words).await;
    }
    let placed = browser
        .wait_js(
            "three answers below the note",
            "const log = document.getElementById('log');
             const note = document.getElementById('notice').getBoundingClientRect();
             const entries = [...log.children].filter((li) => li.id !== 'notice');
             const answers = log.querySelectorAll('.agent-turn .text').length;
             return [answers >= 3, log.firstElementChild.id,
                     entries.every((li) => li.getBoundingClientRect().top >= note.bottom - 0.5),
                     log.scrollHeight > log.clientHeight ? log.scrollTop > 0 : true]",
            |v| v[0] == true,
        )
        .await;
    assert_eq!(
        placed,
        json!([true, "notice", true, true]),
        "every message below the note, never under it; a full log scrolls the note away"
    );
    // Another session attached: the log is emptied, the note stays.
    press(&browser, Key::Escape).await;
    browser
        .js("document.getElementById('next-agent').click()", vec![])
        .await;
    wait_attached(&browser, "karen", "K.A.R.E.N.", "default-main").await;
    let kept = browser
        .js(
            "const log = document.getElementById('log');
             return [log.firstElementChild.id, document.body.innerText.split('offline demo').length - 1]",
            vec![],
        )
        .await;
    assert_eq!(kept, json!(["notice", 1]));
    browser.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_screen_with_reduced_motion_is_usable_from_the_keyboard() {
    let options = BrowserOptions {
        phone: Some((375, 812)),
        extra_args: vec!["--force-prefers-reduced-motion".into()],
        ..BrowserOptions::default()
    };
    let Some(browser) = Browser::start("a_phone_screen_with_reduced_motion", options).await else {
        return;
    };
    let hud = Hud::faux("fallback: { text: \"Hello from a small screen.\" }").await;
    browser
        .open_hud(&hud.url("session=default-main&agent=main"))
        .await;
    let layout = browser
        .js(
            "const inside = (id) => { const r = document.getElementById(id).getBoundingClientRect();
                                      return r.left >= 0 && r.right <= window.innerWidth && r.width > 0; };
             return [window.innerWidth, document.documentElement.scrollWidth <= window.innerWidth,
                     inside('prompt'), inside('send'), inside('prev-agent'), inside('next-agent'), inside('orb'),
                     document.documentElement.dataset.motion, matchMedia('(prefers-reduced-motion: reduce)').matches]",
            vec![],
        )
        .await;
    assert_eq!(layout[0], 375, "{layout}");
    assert_eq!(
        layout.as_array().unwrap()[1..].to_vec(),
        [
            json!(true),
            json!(true),
            json!(true),
            json!(true),
            json!(true),
            json!(true),
            json!("reduced"),
            json!(true)
        ],
        "no sideways scrolling, everything in view, motion reduced: {layout}"
    );
    // Nothing pulses when motion is reduced.
    let animation = browser
        .js(
            "const a = document.getElementById('next-agent'); a.classList.add('pulse');
             const name = getComputedStyle(a).animationName; a.classList.remove('pulse'); return name",
            vec![],
        )
        .await;
    assert_eq!(animation, "none");

    // Tab to the next-agent arrow and press Enter.
    browser
        .js("document.activeElement && document.activeElement.blur()", vec![])
        .await;
    let mut reached = false;
    for _ in 0..20 {
        press(&browser, Key::Tab).await;
        let id = browser.js("return document.activeElement.id", vec![]).await;
        if id == "next-agent" {
            reached = true;
            break;
        }
    }
    assert!(reached, "the arrow is reachable with Tab");
    press(&browser, Key::Enter).await;
    wait_attached(&browser, "karen", "K.A.R.E.N.", "default-main").await;
    // Type and send from the keyboard.
    browser
        .js("document.getElementById('prompt').focus()", vec![])
        .await;
    browser
        .client
        .active_element()
        .await
        .unwrap()
        .send_keys(&("hi".to_owned() + &Key::Enter.to_string()))
        .await
        .unwrap();
    browser
        .wait_js(
            "the answer shows",
            "return document.getElementById('log').textContent",
            |v| text(v).contains("Hello from a small screen."),
        )
        .await;
    // Colours still blend with reduced motion, and end in K.A.R.E.N.'s.
    browser
        .wait_js(
            "the screen wears K.A.R.E.N.'s colour",
            "return getComputedStyle(document.getElementById('wordmark')).color",
            |v| v == &json!(rgb(GREEN)),
        )
        .await;
    browser.screenshot("phone").await;
    browser.finish().await;
}

/// Every answer reports usage: J.A.R.V.I.S.'s model (the faux provider's,
/// `faux`) has a price, K.A.R.E.N.'s (`field-model`) has none.
const USAGE: &str = r#"
rules:
  - when: { agent: main }
    reply: { text: "noted", usage: { input_tokens: 1200, output_tokens: 34, cached_input_tokens: 200 } }
  - when: { agent: karen }
    reply: { text: "found", usage: { input_tokens: 300, output_tokens: 50 } }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bar_shows_the_sessions_tokens_and_cost_after_each_turn() {
    let Some(browser) = Browser::start(
        "the_bar_shows_the_sessions_tokens_and_cost",
        BrowserOptions::default(),
    )
    .await
    else {
        return;
    };
    let home = TempHome::new();
    std::fs::write(
        home.0.join(jarvis_sdk::model::PRICES_FILE),
        "faux: { input: 2.5, output: 10 }\n",
    )
    .unwrap();
    std::fs::create_dir_all(home.0.join("team")).unwrap();
    std::fs::write(
        home.0.join("team/karen.yaml"),
        "name: K.A.R.E.N.\nmodel: field-model\n",
    )
    .unwrap();
    let hud = Hud::start_in(home, Arc::new(FauxProvider::from_yaml(USAGE).unwrap())).await;
    browser
        .open_hud(&hud.url("session=default-main&agent=main"))
        .await;
    let usage = "const u = document.getElementById('usage'); return [u.hidden, u.textContent, u.title];";
    let before = browser.js(usage, vec![]).await;
    assert_eq!(before[0], true, "no turn yet, nothing to show: {before}");

    // (1,200 × 2.5 + 34 × 10) / 1,000,000 = $0.00334.
    prompt(&browser, "remember this").await;
    let after = browser
        .wait_js("the first turn's usage shows", usage, |v| {
            v[1] == "1,200 in · 34 out · $0.0033"
        })
        .await;
    assert_eq!(after[0], false);
    assert!(
        text(&after[2]).contains("1 turn, 200 input tokens from the prompt cache"),
        "{after}"
    );
    prompt(&browser, "and this").await;
    browser
        .wait_js("the session's two turns add up", usage, |v| {
            v[1] == "2,400 in · 68 out · $0.0067"
        })
        .await;
    browser.screenshot("usage").await;

    // A session whose model has no price: its cost is unknown, never $0.
    browser
        .open_hud(&hud.url("session=default-karen&agent=karen"))
        .await;
    browser
        .wait_js("another session starts empty", usage, |v| v[0] == true)
        .await;
    prompt(&browser, "find it").await;
    let unpriced = browser
        .wait_js("the unpriced turn's usage shows", usage, |v| {
            v[1] == "300 in · 50 out · —"
        })
        .await;
    assert!(text(&unpriced[2]).contains("cost unknown"), "{unpriced}");
    browser.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frame_time_is_measured_and_reported() {
    let query = "session=default-main&agent=main";
    let Some((browser, hud)) = open(
        "the_frame_time_is_measured_and_reported",
        "fallback: { text: ok }",
        query,
    )
    .await
    else {
        return;
    };
    for particles in ["normal", "low"] {
        if particles == "low" {
            browser
                .open_hud(&hud.url(&format!("{query}&particles=low")))
                .await;
        }
        let stats = browser.frame_times(2000).await;
        println!(
            "hud frame time ({particles} particles, 1280x800, software rendering): median {:.1} ms, p95 {:.1} ms, max {:.1} ms over {} frames",
            stats.median, stats.p95, stats.max, stats.frames
        );
        assert!(stats.frames >= 10, "the page keeps drawing: {stats:?}");
    }
    browser.finish().await;
}

/// A faux model that holds `agent`'s calls made after a tool result until
/// [`HeldAfterTools::open`]: the test decides when the turn goes on after
/// its tools ran.
#[derive(Debug)]
struct HeldAfterTools {
    inner: FauxProvider,
    agent: &'static str,
    gate: watch::Sender<bool>,
}

impl Provider for HeldAfterTools {
    fn stream(&self, request: ChatRequest) -> ProviderStream {
        let after_tools = matches!(
            request.recorded_messages().last(),
            Some(jarvis_sdk::model::Message::Tool(_))
        );
        if request.metadata.agent_id != self.agent || !after_tools {
            return self.inner.stream(request);
        }
        let mut gate = self.gate.subscribe();
        let answer = self.inner.stream(request);
        Box::pin(
            futures::stream::once(async move {
                let _ = gate.wait_for(|open| *open).await;
                answer
            })
            .flatten(),
        )
    }

    fn name(&self) -> &str {
        "faux"
    }
}

/// The `run_subagent` card: the sub-agent's box (its label, text, tool
/// names and states), whether the HUD is busy, and the log's last text.
const SUBAGENT_CARD: &str = r#"
    const card = [...document.querySelectorAll('#log details.tool')].find((c) => c.dataset.tool === 'run_subagent');
    const box = card && card.querySelector(':scope > .subagent');
    return {
      label: box ? box.querySelector('.label').textContent : null,
      text: box ? [...box.querySelectorAll(':scope > .text')].map((t) => t.textContent).join('|') : null,
      tools: box ? [...box.querySelectorAll('details.tool')].map((t) => t.dataset.tool + ':' + t.querySelector('.state').textContent) : [],
      done: box ? box.classList.contains('done') : false,
      flat: [...document.querySelectorAll('#log > li > details.tool, #log .agent-turn > details.tool')].map((t) => t.dataset.tool),
      busy: document.documentElement.dataset.busy || document.body.dataset.busy || null,
      log: document.getElementById('log').textContent,
    };
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_streamed_text_and_tool_call_fold_under_the_parents_tool_call() {
    let Some(browser) =
        Browser::start("a_subagents_work_folds_under_its_call", BrowserOptions::default()).await
    else {
        return;
    };
    let home = TempHome::new();
    std::fs::create_dir_all(home.0.join("team")).unwrap();
    std::fs::write(
        home.0.join("team/main.yaml"),
        "subagents:\n  - { name: researcher, description: reads, tools: [list_dir] }\n",
    )
    .unwrap();
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: run_subagent, arguments: { name: researcher, task: "목록을 봐" } } ] }
  - when: { agent: main.researcher, last_role: user }
    reply: { text: "폴더를 살펴보는 중", chunks: 3, tool_calls: [ { name: list_dir, arguments: { path: "." } } ] }
  - when: { agent: main.researcher, last_role: tool }
    reply: { text: "연구 결과: 비어 있음", chunks: 2 }
  - when: { agent: main, last_role: tool }
    reply: { text: "자비스의 답: 폴더가 비어 있습니다" }
"#;
    let provider = Arc::new(HeldAfterTools {
        inner: FauxProvider::from_yaml(script).unwrap(),
        agent: "main",
        gate: watch::Sender::new(false),
    });
    let hud = Hud::start_in(home, provider.clone()).await;
    browser.open_hud(&hud.url("session=s-sub&agent=main")).await;
    prompt(&browser, "폴더 봐 줘").await;
    let seen = browser
        .wait_js(
            "the sub-agent's work folds under run_subagent",
            SUBAGENT_CARD,
            |v| v["done"] == true && v["tools"] == json!(["list_dir:done"]),
        )
        .await;
    assert_eq!(text(&seen["label"]), "↳ researcher");
    assert_eq!(text(&seen["text"]), "폴더를 살펴보는 중|연구 결과: 비어 있음");
    assert_eq!(
        seen["flat"],
        json!(["run_subagent"]),
        "list_dir is not a card of the turn itself"
    );
    assert_eq!(
        text(&seen["busy"]),
        "true",
        "the sub-agent's agent_end does not end the turn: JARVIS still works"
    );
    assert!(!text(&seen["log"]).contains("자비스의 답"));
    browser.screenshot("subagent").await;
    provider.gate.send_replace(true);
    let done = browser
        .wait_js("the parent answers", SUBAGENT_CARD, |v| {
            text(&v["log"]).contains("자비스의 답") && text(&v["busy"]) == "false"
        })
        .await;
    assert_eq!(done["flat"], json!(["run_subagent"]));
    browser.finish().await;
}

/// JARVIS plans a task, then finishes its first step.
const FOCUS: &str = r#"
rules:
  - when: { agent: main, last_role: user, last_user: "분석 시작" }
    reply: { tool_calls: [ { name: start_focus, arguments: { title: "청약 분석", plan: ["공고 읽기", "자격 확인", "정리"] } } ] }
  - when: { agent: main, last_role: user, last_user: "다음" }
    reply: { tool_calls: [ { name: focus_step, arguments: { status: done, note: "공고 3건" } } ] }
fallback: { text: "네." }
"#;

const FOCUS_CARD: &str = "const card = document.getElementById('focus-card');
     return {hidden: card.hidden, task: card.dataset.task || null,
             name: document.getElementById('focus-name').textContent,
             progress: document.getElementById('focus-progress').textContent,
             steps: [...card.querySelectorAll('#focus-steps li')].map(li =>
                 li.textContent + ':' + li.dataset.status + (li.getAttribute('aria-current') === 'step' ? ':current' : '')),
             panel: document.getElementById('focus-panel').textContent};";

#[tokio::test]
async fn the_focus_card_shows_the_steps_and_the_current_one_also_after_a_reload() {
    let Some(browser) = Browser::start("the_focus_card_shows_the_steps", BrowserOptions::default()).await
    else {
        return;
    };
    let hud = Hud::faux(FOCUS).await;
    browser
        .open_hud(&hud.url("session=default-main&agent=main"))
        .await;
    let none = browser.js(FOCUS_CARD, vec![]).await;
    assert_eq!(none["hidden"], true, "no task, no card: {none}");

    prompt(&browser, "청약 분석 시작").await;
    let started = browser
        .wait_js("the card shows the plan", FOCUS_CARD, |v| v["hidden"] == false)
        .await;
    assert_eq!(text(&started["name"]), "청약 분석");
    assert_eq!(
        started["steps"],
        json!(["공고 읽기:active:current", "자격 확인:pending", "정리:pending"])
    );
    assert_eq!(text(&started["progress"]), "0/3");
    prompt(&browser, "다음").await;
    let moved = browser
        .wait_js("the current step moves on", FOCUS_CARD, |v| {
            v["steps"] == json!(["공고 읽기:done", "자격 확인:active:current", "정리:pending"])
        })
        .await;
    assert_eq!(text(&moved["progress"]), "1/3");
    assert!(text(&moved["panel"]).contains("공고 3건"), "{moved}");
    browser.screenshot("focus").await;

    // A new page gets the active task from the WebSocket as it opens.
    browser
        .open_hud(&hud.url("session=default-main&agent=main"))
        .await;
    let reloaded = browser
        .wait_js("the reopened page shows the task", FOCUS_CARD, |v| {
            v["hidden"] == false
        })
        .await;
    assert_eq!(reloaded["steps"], moved["steps"]);
    assert_eq!(text(&reloaded["task"]), "f-1");
    browser.finish().await;
}
