//! A fuzz test against a live server: 100,000 generated WebSocket frames
//! over several connections (random JSON shapes, every field of every
//! client message with a wrong type or missing, unknown types, huge
//! numbers, deep nesting, frames over 64 KiB and over the 256 KiB limit,
//! invalid UTF-8, binary frames, valid messages among them).
//!
//! Every frame must be answered as the protocol says, or end its connection
//! with the documented close code: a frame that is not a client message gets
//! `error bad_request`, an approval for nothing waiting
//! `approval_not_pending`, `abort` and feedback nothing, a prompt runs a turn
//! on the faux model (or gets `busy` / `invalid_input`), invalid UTF-8 closes
//! 1007, an oversized frame 1009. The client then reconnects and goes on.
//! No thread of the server may panic, and afterwards it serves a normal
//! turn. Answers are counted exactly: after each batch the client sends a
//! probe (an approval for a made-up request) and reads up to its answer.
//!
//! The generator is seeded; the seed is printed, and `JARVIS_FUZZ_SEED=N`
//! replays it (`JARVIS_FUZZ_FRAMES` runs fewer or more frames). A one-line
//! summary ends the run.

use futures::{SinkExt, StreamExt};
use jarvis_pack_housing::HousingPack;
use jarvis_sdk::agent::Durability;
use jarvis_sdk::app::{AppConfig, build_app};
use jarvis_sdk::model::FauxProvider;
use jarvis_server::protocol::{CLOSE_CODES, CLOSE_INVALID_UTF8, CLOSE_TOO_BIG, ClientMessage, codes};
use jarvis_server::{Limits, ServerConfig, ServerState, serve};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::Frame as RawFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data as OpData, OpCode};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::support::{TempHome, WAIT};

/// Replays a run: the seed it printed.
const SEED_ENV: &str = "JARVIS_FUZZ_SEED";
/// How many frames to generate (default 100,000).
const FRAMES_ENV: &str = "JARVIS_FUZZ_FRAMES";
const FRAMES: usize = 100_000;
const CONNECTIONS: usize = 4;
/// Frames sent before the client reads up to a probe's answer.
const BATCH: usize = 32;
/// The whole run, in a debug build on two cores.
const DEADLINE: Duration = Duration::from_secs(120);
/// Frames over 64 KiB, at most, over the run (the oversized ones included).
const BIG_FRAMES: usize = 1_000;
const KIB: usize = 1024;

/// Panics on the server's threads (named `fuzz-server…`).
static SERVER_PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_server_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current()
                .name()
                .is_some_and(|name| name.starts_with("fuzz-server"))
            {
                SERVER_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

/// SplitMix64: small, fast, and the same everywhere.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, per_mille: usize) -> bool {
        self.below(1000) < per_mille
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// What must become of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// An `error` frame with this code.
    Error(&'static str),
    /// Nothing comes back (`abort`, feedback on an unknown message).
    Silent,
    /// A turn runs, or an error says why not (`busy`, `invalid_input`).
    Prompt,
    /// The connection closes with this code.
    Closes(u16),
}

/// One generated frame.
#[derive(Debug)]
enum Out {
    Text(String),
    RawText(Vec<u8>),
    Binary(Vec<u8>),
}

impl Out {
    fn len(&self) -> usize {
        match self {
            Out::Text(t) => t.len(),
            Out::RawText(b) | Out::Binary(b) => b.len(),
        }
    }

    fn message(self) -> Message {
        match self {
            Out::Text(text) => Message::text(text),
            Out::RawText(bytes) => Message::Frame(RawFrame::message(bytes, OpCode::Data(OpData::Text), true)),
            Out::Binary(bytes) => Message::binary(bytes),
        }
    }
}

/// What the protocol says about a text frame: the server's own wire type
/// decides what parses; the generator's intent is checked against it.
fn fate_of_text(text: &str) -> Fate {
    match serde_json::from_str::<ClientMessage>(text) {
        Err(_) => Fate::Error(codes::BAD_REQUEST),
        Ok(ClientMessage::Prompt { .. }) => Fate::Prompt,
        Ok(ClientMessage::Approval { .. }) => Fate::Error(codes::APPROVAL_NOT_PENDING),
        Ok(ClientMessage::Abort) => Fate::Silent,
        Ok(ClientMessage::ProactiveFeedback { message_id, .. }) if message_id.trim().is_empty() => {
            Fate::Error(codes::BAD_REQUEST)
        }
        Ok(ClientMessage::ProactiveFeedback { .. }) => Fate::Silent,
        Ok(other) => panic!("the fuzz test does not know the client message {other:?}"),
    }
}

/// The fields of each client message and a right value for each.
fn valid_message(rng: &mut Rng) -> Value {
    match rng.below(4) {
        0 => json!({"type": "prompt", "text": prompt_text(rng)}),
        1 => json!({"type": "approval", "request_id": string(rng, 40),
                    "decision": rng.pick(&["allow", "always", "deny"])}),
        2 => json!({"type": "abort"}),
        _ => json!({"type": "proactive_feedback", "message_id": format!("m-{}", rng.next_u64()),
                    "reaction": rng.pick(&["answered", "dismissed"])}),
    }
}

/// A prompt's text: never a slash command (those are features with effects
/// of their own), sometimes blank or full of markup the validation refuses.
fn prompt_text(rng: &mut Rng) -> String {
    let text = match rng.below(10) {
        0 => "   ".to_owned(),
        1 => "<script>alert(1)</script>".to_owned(),
        _ => string(rng, 120),
    };
    if text.starts_with('/') {
        format!("x{text}")
    } else {
        text
    }
}

/// Pieces random strings are made of: ASCII, JSON's special characters,
/// Korean, emoji, combining and zero-width characters, bidi controls.
const PIECES: &[&str] = &[
    "a",
    "Z",
    "0",
    " ",
    "\"",
    "\\",
    "/",
    "\n",
    "\t",
    "\u{0}",
    "\u{1f}",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "한",
    "국어",
    "🦀",
    "👩‍💻",
    "e\u{301}",
    "\u{200b}",
    "\u{202e}",
    "\u{feff}",
    "%",
    "<",
    ">",
    "&#x3c;",
    "\u{10ffff}",
];

fn string(rng: &mut Rng, max: usize) -> String {
    let n = rng.below(max + 1);
    (0..n).map(|_| rng.pick(PIECES)).collect()
}

/// A JSON value of any shape, `depth` levels deep at most.
fn any_value(rng: &mut Rng, depth: usize) -> Value {
    let kinds = if depth == 0 { 5 } else { 7 };
    match rng.below(kinds) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(500)),
        2 => json!(rng.next_u64() as i64),
        3 => json!(f64::from_bits(rng.next_u64() & 0x7fef_ffff_ffff_ffff)),
        4 => Value::String(string(rng, 30)),
        5 => Value::Array((0..rng.below(5)).map(|_| any_value(rng, depth - 1)).collect()),
        _ => {
            let keys = ["type", "text", "request_id", "decision", "message_id", "reaction"];
            let mut object = serde_json::Map::new();
            for _ in 0..rng.below(5) {
                let key = if rng.chance(500) {
                    rng.pick(&keys).to_owned()
                } else {
                    string(rng, 8)
                };
                object.insert(key, any_value(rng, depth - 1));
            }
            Value::Object(object)
        }
    }
}

/// A value of the wrong type for a string field (or a string no enum has).
fn wrong_value(rng: &mut Rng) -> Value {
    match rng.below(9) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(0),
        3 => json!(-1.5),
        4 => json!([]),
        5 => json!({}),
        6 => json!(["text"]),
        7 => json!({"text": "hi"}),
        _ => Value::String(
            rng.pick(&["", "ALLOW", "maybe", "timeout", "Prompt", "x"])
                .to_owned(),
        ),
    }
}

/// Every field of every client message (its `type` too) with each wrong
/// value and missing, and unknown types: sent first, whatever the seed.
fn every_wrong_field() -> Vec<String> {
    let templates = [
        json!({"type": "prompt", "text": "hi"}),
        json!({"type": "approval", "request_id": "r", "decision": "allow"}),
        json!({"type": "abort"}),
        json!({"type": "proactive_feedback", "message_id": "m", "reaction": "answered"}),
    ];
    let wrong = [
        Value::Null,
        json!(true),
        json!(0),
        json!(-1.5),
        json!(u64::MAX),
        json!([]),
        json!({}),
        json!(["x"]),
        json!({"x": 1}),
        json!("ALLOW"),
        json!(""),
    ];
    let mut frames = Vec::new();
    for template in &templates {
        let object = template.as_object().expect("an object");
        for field in object.keys() {
            let mut missing = object.clone();
            missing.remove(field);
            frames.push(Value::Object(missing).to_string());
            for value in &wrong {
                let mut changed = object.clone();
                changed.insert(field.clone(), value.clone());
                frames.push(Value::Object(changed).to_string());
            }
        }
    }
    for unknown in [
        "sing",
        "PROMPT",
        "Prompt",
        "prompt ",
        "",
        "approval_request",
        "agent_end",
        "error",
    ] {
        frames.push(json!({"type": unknown, "text": "hi"}).to_string());
    }
    frames
}

/// A client message with one field wrong: another type, missing, or the
/// `type` unknown.
fn wrong_message(rng: &mut Rng) -> Value {
    let mut message = valid_message(rng);
    let object = message.as_object_mut().expect("messages are objects");
    let fields: Vec<String> = object.keys().cloned().collect();
    let field = rng.pick(&fields);
    match rng.below(4) {
        0 => {
            object.remove(&field);
        }
        1 if field == "type" => {
            let unknown = rng.pick(&["sing", "PROMPT", "prompt ", "", "approval_request", "error"]);
            object.insert(field, json!(unknown));
        }
        _ => {
            object.insert(field, wrong_value(rng));
        }
    }
    if rng.chance(100) {
        object.insert(string(rng, 6), any_value(rng, 2));
    }
    message
}

/// Text that is not JSON, or not quite.
fn malformed(rng: &mut Rng) -> String {
    let text = valid_message(rng).to_string();
    let chars: Vec<char> = text.chars().collect();
    let at = rng.below(chars.len());
    match rng.below(6) {
        0 => chars[..at].iter().collect(),
        1 => format!("{text}{}", rng.pick(&["}", ",", " x", "\u{0}", "]"])),
        2 => chars[..at].iter().chain(chars[at + 1..].iter()).collect(),
        3 => string(rng, 60),
        4 => text.replace('"', "'"),
        _ => rng
            .pick(&[
                "",
                " ",
                "null",
                "0",
                "[]",
                "\"prompt\"",
                "{\"type\":\"prompt\",\"type\":\"abort\"}",
            ])
            .to_owned(),
    }
}

/// Numbers no type holds, where the protocol wants strings, and elsewhere.
fn huge_numbers(rng: &mut Rng) -> String {
    let number = rng.pick(&[
        "1e999",
        "-1e999",
        "1e-999",
        "123456789012345678901234567890123456789",
        "-0",
        "1.7976931348623157e309",
        "18446744073709551616",
        "0.0000000000000000000000000000001",
    ]);
    match rng.below(4) {
        0 => format!(r#"{{"type":"prompt","text":{number}}}"#),
        1 => format!(r#"{{"type":"approval","request_id":{number},"decision":"allow"}}"#),
        2 => format!(r#"{{"type":"abort","n":{number}}}"#),
        _ => format!(r#"[{number},{number}]"#),
    }
}

/// Arrays and objects nested far beyond what a parser should recurse into.
fn deep(rng: &mut Rng) -> String {
    let n = rng.between(64, 20_000);
    match rng.below(3) {
        0 => format!("{}{}", "[".repeat(n), "]".repeat(n)),
        1 => format!("{}1{}", r#"{"a":"#.repeat(n / 2), "}".repeat(n / 2)),
        _ => format!(
            r#"{{"type":"prompt","text":{}"x"{}}}"#,
            "[".repeat(n),
            "]".repeat(n)
        ),
    }
}

/// A text frame of about `size` bytes: JSON around an ASCII filler.
fn sized(rng: &mut Rng, size: usize) -> String {
    let (head, tail, array) = rng.pick(&[
        (r#"{"type":"prompt","text":"한국어 "#, r#""}"#, false),
        (
            r#"{"type":"approval","decision":3,"request_id":""#,
            r#""}"#,
            false,
        ),
        (r#"{"type":"sing","words":""#, r#""}"#, false),
        (r#"{"type":"prompt","text":["#, r#"1]}"#, true),
    ]);
    let n = size.saturating_sub(head.len() + tail.len());
    let filler = if array { "1,".repeat(n / 2) } else { "x".repeat(n) };
    format!("{head}{filler}{tail}")
}

/// A text frame with bytes that are not UTF-8.
fn invalid_utf8(rng: &mut Rng) -> Vec<u8> {
    let mut bytes = valid_message(rng).to_string().into_bytes();
    let bad: &[u8] = rng.pick(&[
        &[0xff][..],
        &[0xfe, 0xff],
        &[0xc0, 0xaf],             // overlong '/'
        &[0xed, 0xa0, 0x80],       // a surrogate
        &[0xe2, 0x82],             // cut short
        &[0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
        &[0x80],
    ]);
    let at = if rng.chance(300) {
        bytes.len()
    } else {
        rng.below(bytes.len() + 1)
    };
    bytes.splice(at..at, bad.iter().copied());
    bytes
}

/// The generator of one connection's frames.
struct Generator {
    rng: Rng,
    /// Frames over 64 KiB this generator may still make.
    big_left: usize,
    /// Frames to send before the random ones.
    first: std::collections::VecDeque<String>,
}

impl Generator {
    fn frame(&mut self) -> (Out, Fate) {
        if let Some(text) = self.first.pop_front() {
            let fate = fate_of_text(&text);
            return (Out::Text(text), fate);
        }
        let rng = &mut self.rng;
        let roll = rng.below(100_000);
        let big = self.big_left > 0;
        let (out, fate) = match roll {
            // Over the limit: the connection closes 1009. Under twice the
            // limit, which the server reads to the end before refusing, so
            // the close is not lost to a reset while this client still writes.
            0..30 if big => {
                self.big_left -= 1;
                let size = Limits::default().max_frame_bytes + rng.between(64, 200 * KIB);
                (Out::Text(sized(rng, size)), Fate::Closes(CLOSE_TOO_BIG))
            }
            // Between 64 KiB and the limit: answered like any other.
            30..630 if big => {
                self.big_left -= 1;
                let size = rng.between(64 * KIB + 64, 250 * KIB);
                let text = sized(rng, size);
                let fate = fate_of_text(&text);
                (Out::Text(text), fate)
            }
            630..930 => (Out::RawText(invalid_utf8(rng)), Fate::Closes(CLOSE_INVALID_UTF8)),
            930..1930 => {
                let bytes = if rng.chance(500) {
                    valid_message(rng).to_string().into_bytes()
                } else {
                    (0..rng.below(2000)).map(|_| rng.next_u64() as u8).collect()
                };
                (Out::Binary(bytes), Fate::Error(codes::BAD_REQUEST))
            }
            1930..2230 => {
                let text = json!({"type": "prompt", "text": prompt_text(rng)}).to_string();
                (Out::Text(text), Fate::Prompt)
            }
            2230..5230 => {
                let mut message = valid_message(rng);
                if message["type"] == "prompt" {
                    message = json!({"type": "abort"});
                }
                let text = message.to_string();
                let fate = fate_of_text(&text);
                (Out::Text(text), fate)
            }
            5230..45_000 => {
                let text = wrong_message(rng).to_string();
                let fate = fate_of_text(&text);
                (Out::Text(text), fate)
            }
            45_000..75_000 => {
                let text = any_value(rng, 4).to_string();
                let fate = fate_of_text(&text);
                (Out::Text(text), fate)
            }
            75_000..92_000 => {
                let text = malformed(rng);
                let fate = fate_of_text(&text);
                (Out::Text(text), fate)
            }
            92_000..94_000 => {
                let text = deep(rng);
                (Out::Text(text), Fate::Error(codes::BAD_REQUEST))
            }
            94_000..97_000 => {
                let text = huge_numbers(rng);
                let fate = fate_of_text(&text);
                (Out::Text(text), fate)
            }
            _ => {
                let text = json!({"type": string(rng, 12), "text": string(rng, 20)}).to_string();
                let fate = fate_of_text(&text);
                (Out::Text(text), fate)
            }
        };
        (out, fate)
    }
}

/// What one connection saw.
#[derive(Debug, Default)]
struct Tally {
    frames: usize,
    big_frames: usize,
    probes: usize,
    reconnects: usize,
    silent: usize,
    prompts: usize,
    turns: usize,
    closes: BTreeMap<u16, usize>,
    errors: BTreeMap<String, usize>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.frames += other.frames;
        self.big_frames += other.big_frames;
        self.probes += other.probes;
        self.reconnects += other.reconnects;
        self.silent += other.silent;
        self.prompts += other.prompts;
        self.turns += other.turns;
        for (code, n) in &other.closes {
            *self.closes.entry(*code).or_default() += n;
        }
        for (code, n) in &other.errors {
            *self.errors.entry(code.clone()).or_default() += n;
        }
    }
}

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn connect(addr: SocketAddr, session: &str) -> Socket {
    let url = format!("ws://{addr}/ws?session_id={session}");
    let (mut socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("the server accepts a connection");
    // The first frame of an open connection is `agent_activity`.
    match tokio::time::timeout(WAIT, socket.next())
        .await
        .expect("the first frame arrives")
    {
        Some(Ok(Message::Text(text))) => assert!(text.contains("agent_activity"), "{text}"),
        other => panic!("the connection did not open: {other:?}"),
    }
    socket
}

/// The next thing the server sent: a JSON frame or the close code.
enum Got {
    Json(Value),
    Closed(u16),
}

async fn next(socket: &mut Socket, seed: u64, waiting: &str) -> Got {
    loop {
        let message = tokio::time::timeout(WAIT, socket.next())
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: no answer within {WAIT:?} while waiting for {waiting}"));
        return match message {
            Some(Ok(Message::Text(text))) => {
                let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
                    panic!("seed {seed}: the server sent a frame that is not JSON ({e}): {text}")
                });
                assert!(
                    value["type"].is_string(),
                    "seed {seed}: a frame without a type: {text}"
                );
                Got::Json(value)
            }
            Some(Ok(Message::Close(frame))) => Got::Closed(frame.map_or(1005, |f| u16::from(f.code))),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(other)) => panic!("seed {seed}: the server sent {other:?}"),
            Some(Err(error)) => {
                panic!(
                    "seed {seed}: the connection broke without a close frame ({error}) while waiting for {waiting}"
                )
            }
            None => {
                panic!("seed {seed}: the connection ended without a close frame while waiting for {waiting}")
            }
        };
    }
}

/// Answers owed on one connection: errors from frames (exact counts), and
/// the prompts that may still answer with an error.
#[derive(Debug, Default)]
struct Owed {
    errors: BTreeMap<&'static str, usize>,
    got: BTreeMap<String, usize>,
}

/// Error codes a prompt may get back instead of a turn.
const PROMPT_CODES: &[&str] = &[codes::BUSY, codes::INVALID_INPUT];

/// Takes in one frame from the server; `Some(code)` when the connection closed.
fn take_in(got: Got, tally: &mut Tally, owed: &mut Owed, seed: u64) -> Option<u16> {
    match got {
        Got::Closed(code) => Some(code),
        Got::Json(frame) => {
            match frame["type"].as_str() {
                Some("error") => {
                    let code = frame["code"].as_str().unwrap_or_default().to_owned();
                    assert!(
                        codes::ALL.contains(&code.as_str()),
                        "seed {seed}: an undocumented error code: {frame}"
                    );
                    assert!(
                        frame["message"].as_str().is_some_and(|m| !m.is_empty()),
                        "seed {seed}: an error without words: {frame}"
                    );
                    *owed.got.entry(code.clone()).or_default() += 1;
                    *tally.errors.entry(code).or_default() += 1;
                }
                Some("agent_end") => tally.turns += 1,
                _ => {}
            }
            None
        }
    }
}

/// Checks that every error owed arrived and nothing else did (prompt
/// errors may trail: at most one per prompt, checked at the end).
fn settle(owed: &mut Owed, seed: u64, what: &str) {
    for (code, want) in &owed.errors {
        let got = owed.got.get(*code).copied().unwrap_or(0);
        assert_eq!(got, *want, "seed {seed}: {what}: {code} errors");
    }
    for (code, got) in &owed.got {
        assert!(
            owed.errors.contains_key(code.as_str()) || PROMPT_CODES.contains(&code.as_str()),
            "seed {seed}: {what}: {got} unexpected {code} errors"
        );
    }
}

/// One connection's share of the run.
async fn client(addr: SocketAddr, index: usize, seed: u64, frames: usize) -> Tally {
    let session = format!("fuzz-{index}");
    let mut generator = Generator {
        rng: Rng(seed ^ (index as u64).wrapping_mul(0xa076_1d64_78bd_642f)),
        big_left: BIG_FRAMES / CONNECTIONS,
        first: if index == 0 {
            every_wrong_field().into()
        } else {
            Default::default()
        },
    };
    let mut tally = Tally::default();
    let mut owed = Owed::default();
    let mut socket = connect(addr, &session).await;
    while tally.frames < frames {
        let mut closes = None;
        for _ in 0..BATCH {
            if tally.frames == frames {
                break;
            }
            let (out, fate) = generator.frame();
            tally.frames += 1;
            if out.len() > 64 * KIB {
                tally.big_frames += 1;
            }
            let sent = socket.send(out.message()).await;
            match fate {
                Fate::Error(code) => *owed.errors.entry(code).or_default() += 1,
                Fate::Silent => tally.silent += 1,
                Fate::Prompt => tally.prompts += 1,
                Fate::Closes(code) => {
                    // The server may stop reading an oversized frame before
                    // it was all written: the close frame tells.
                    let _ = sent;
                    closes = Some(code);
                    break;
                }
            }
            sent.unwrap_or_else(|e| panic!("seed {seed}: a frame could not be sent: {e}"));
        }
        match closes {
            Some(want) => {
                // Everything before the broken frame is answered, then the close.
                let code = loop {
                    let waiting = format!("the close {want}");
                    if let Some(code) = take_in(
                        next(&mut socket, seed, &waiting).await,
                        &mut tally,
                        &mut owed,
                        seed,
                    ) {
                        break code;
                    }
                };
                assert!(
                    CLOSE_CODES.contains(&code),
                    "seed {seed}: an undocumented close code {code}"
                );
                assert_eq!(code, want, "seed {seed}: the close code");
                settle(&mut owed, seed, "before a close");
                *tally.closes.entry(code).or_default() += 1;
                owed = Owed::default();
                socket = connect(addr, &session).await;
                tally.reconnects += 1;
            }
            None => {
                let probe = format!("probe-{index}-{}", tally.probes);
                tally.probes += 1;
                let text = json!({"type": "approval", "request_id": probe, "decision": "deny"}).to_string();
                socket.send(Message::text(text)).await.unwrap();
                *owed.errors.entry(codes::APPROVAL_NOT_PENDING).or_default() += 1;
                loop {
                    let got = next(&mut socket, seed, &format!("the answer to {probe}")).await;
                    let is_probe = matches!(&got, Got::Json(f) if f["type"] == "error"
                        && f["message"].as_str().is_some_and(|m| m.contains(&probe)));
                    if let Some(code) = take_in(got, &mut tally, &mut owed, seed) {
                        panic!(
                            "seed {seed}: the connection closed ({code}) on frames that should not close it"
                        );
                    }
                    if is_probe {
                        break;
                    }
                }
                settle(&mut owed, seed, "at a probe");
            }
        }
    }
    let prompt_errors: usize = PROMPT_CODES
        .iter()
        .map(|c| tally.errors.get(*c).copied().unwrap_or(0))
        .sum();
    assert!(
        prompt_errors <= tally.prompts,
        "seed {seed}: more prompt errors than prompts"
    );
    let _ = socket.close(None).await;
    tally
}

/// A normal turn on a fresh session: the server still works.
async fn normal_turn(addr: SocketAddr) -> Value {
    let mut socket = connect(addr, "fuzz-after").await;
    socket
        .send(Message::text(
            json!({"type": "prompt", "text": "hello"}).to_string(),
        ))
        .await
        .unwrap();
    loop {
        match next(&mut socket, 0, "a normal turn's end").await {
            Got::Json(frame) if frame["type"] == "agent_end" => return frame,
            Got::Json(_) => {}
            Got::Closed(code) => panic!("closed {code} during a normal turn"),
        }
    }
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {value:?}")),
    )
}

#[test]
fn a_hundred_thousand_generated_frames_get_documented_answers_and_the_server_still_serves() {
    count_server_panics();
    let seed = env_number(SEED_ENV).unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        now.as_nanos() as u64 ^ u64::from(std::process::id())
    });
    let frames = env_number(FRAMES_ENV).map_or(FRAMES, |n| n as usize);
    // Past the test harness's capture, so a failing or slow run can be replayed.
    let _ = writeln!(
        std::io::stderr(),
        "fuzz: seed {seed} (replay with {SEED_ENV}={seed})"
    );

    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fuzz-server")
        .enable_all()
        .build()
        .unwrap();
    let home = TempHome::new();
    let (addr, stop, served) = server_runtime.block_on(async {
        let mut config = AppConfig::for_home(&home.0).with_provider(Arc::new(
            FauxProvider::from_yaml("fallback: { text: fuzzed }").unwrap(),
        ));
        config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
        // Thousands of turns: an fsync each would measure the disk.
        config.durability = Durability::Never;
        let app = build_app(config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = ServerState::new(app, ServerConfig::loopback(0));
        let served = tokio::spawn(serve(listener, state, async move {
            let _ = stopped.await;
        }));
        (addr, stop, served)
    });

    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let (tally, after) = clients.block_on(async {
        let shares: Vec<usize> = (0..CONNECTIONS)
            .map(|i| frames / CONNECTIONS + usize::from(i < frames % CONNECTIONS))
            .collect();
        let tasks: Vec<_> = shares
            .into_iter()
            .enumerate()
            .map(|(i, share)| tokio::spawn(client(addr, i, seed, share)))
            .collect();
        let mut tally = Tally::default();
        for task in tasks {
            match task.await {
                Ok(one) => tally.add(&one),
                Err(error) => std::panic::resume_unwind(error.into_panic()),
            }
        }
        (tally, normal_turn(addr).await)
    });
    let elapsed = started.elapsed();
    let _ = writeln!(
        std::io::stderr(),
        "fuzz: seed {seed}: {} frames ({} over 64 KiB) + {} probes over {CONNECTIONS} connections, {} reconnects; \
         closes {:?}; errors {:?}; {} accepted silently; {} prompts, {} turns; {:.1} s",
        tally.frames,
        tally.big_frames,
        tally.probes,
        tally.reconnects,
        tally.closes,
        tally.errors,
        tally.silent,
        tally.prompts,
        tally.turns,
        elapsed.as_secs_f64()
    );

    assert_eq!(
        after["final_message"]["content"], "fuzzed",
        "a normal turn after the fuzz"
    );
    assert_eq!(
        SERVER_PANICS.load(Ordering::SeqCst),
        0,
        "seed {seed}: a server thread panicked"
    );
    assert_eq!(tally.frames, frames);
    assert!(
        tally.big_frames <= BIG_FRAMES,
        "at most {BIG_FRAMES} frames over 64 KiB"
    );
    if frames >= FRAMES {
        // Every kind of ending was exercised.
        for code in [CLOSE_INVALID_UTF8, CLOSE_TOO_BIG] {
            assert!(
                tally.closes.get(&code).copied().unwrap_or(0) > 0,
                "seed {seed}: no close {code}"
            );
        }
        assert!(tally.turns > 0, "seed {seed}: no prompt ran a turn");
        assert!(
            elapsed < DEADLINE,
            "seed {seed}: the run took {elapsed:?}, over {DEADLINE:?}"
        );
    }
    let _ = stop.send(());
    clients.block_on(async {
        tokio::time::timeout(WAIT, served)
            .await
            .expect("the server stops in time")
            .unwrap()
            .unwrap();
    });
    server_runtime.shutdown_timeout(WAIT);
}
