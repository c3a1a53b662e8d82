//! [`FauxProvider`]: a scripted model for tests and for the offline demo.
//!
//! It plays a [`FauxScript`] and records every request it receives. Scripts
//! are YAML (or built in code):
//!
//! ```yaml
//! rules:            # tried first, in order; a rule fires any number of times unless `times` caps it
//!   - when: { agent: karen, purpose: step, last_role: user, last_user: "청약", has_tools: true }
//!     reply: { tool_calls: [ { name: sh_notice, arguments: { region: "서울" } } ] }
//!     times: 1
//!   # `when` keys, all optional: agent (agent id); purpose (step | nudge | summary | continuation |
//!   # judgement | thought | reflection | distillation); last_user (regex on the last user message of the recorded history, not on
//!   # injected instructions); last_role (user | assistant | tool: the last recorded message); has_tools (bool)
//! replies:          # then consumed in order, once each, with a separate cursor per session
//!   - { text: "Hello there", chunks: 3 }                  # text split by characters into 3 deltas
//!   - { thinking: "checking", tool_calls: [ { name: read_file, arguments: { path: "a.txt" } } ] }
//!   - { empty: true }                                     # an empty answer
//!   - { error: "upstream overloaded" }                    # or error: { message: "...", status: 529 }
//!   - { delay_ms: 200, text: "slow", usage: { input_tokens: 12, output_tokens: 3 } }
//!   - { text: "piece by piece", chunks: 3, chunk_delay_ms: 500 }   # 500 ms between text deltas
//! fallback: { text: "done" }    # when nothing else applies; default: a provider error saying the script is exhausted
//! ```
//!
//! Tool call ids are `call_<n>`, counting from 1 over the provider's life.
//! Unknown keys are errors, so a typo in a script fails loudly.
//!
//! With a request log ([`FauxProvider::with_request_log`]; the app sets it
//! from `JARVIS_FAUX__REQUEST_LOG`), every request received is also
//! appended to that file as one JSON line, so tests that drive a whole
//! binary can see what the model was sent:
//! `{"agent","session_id","purpose","messages":[{"role","content"}],"tools":[names]}`
//! (the system prompt and the memory message included as they were sent).
//!
//! ```
//! use futures::StreamExt;
//! use jarvis_model::{ChatRequest, FauxProvider, Message, Provider, ProviderEvent};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let faux = FauxProvider::from_yaml(r#"
//! replies:
//!   - { text: "Hello there", chunks: 3 }
//! fallback: { text: "done" }
//! "#).unwrap();
//! let mut stream = faux.stream(ChatRequest::new("faux", vec![Message::user("hi")]));
//! let mut text = String::new();
//! while let Some(event) = stream.next().await {
//!     if let ProviderEvent::TextDelta(t) = event.unwrap() {
//!         text.push_str(&t);
//!     }
//! }
//! assert_eq!(text, "Hello there");
//! assert_eq!(faux.requests().len(), 1);
//! # });
//! ```

mod script;

pub use script::{FauxError, FauxReply, FauxRule, FauxScript, FauxToolCall, FauxWhen};

use futures::{StreamExt, stream};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use super::error::ProviderError;
use super::event::{FinishReason, ProviderEvent};
use super::provider::{Provider, ProviderStream};
use super::request::ChatRequest;
use script::CompiledWhen;

/// The environment variable naming a script file.
pub const FAUX_SCRIPT_ENV: &str = "JARVIS_FAUX__SCRIPT";

/// The environment variable naming the request log (see the module docs).
pub const FAUX_REQUEST_LOG_ENV: &str = "JARVIS_FAUX__REQUEST_LOG";

/// The built-in demo script, played when no script is configured: a short
/// scripted tour. Anything said gets J.A.R.V.I.S.'s introduction (the
/// fallback); a message about tools or files makes him use `list_dir`; a
/// note or memo makes him ask to `write_file` (an approval request); a
/// message about notices (청약, 공고) makes him delegate to K.A.R.E.N. with
/// `ask_agent`, who looks the notices up with `sh_notice` (the bundled sample
/// source in the demo) and answers from the result. K.A.R.E.N.'s own
/// sessions look notices up whatever is said. No answer restates a tool
/// result it cannot see (a script cannot read one): the texts point at the
/// results, which the screens show, so no notice is ever made up.
pub const DEMO_SCRIPT: &str = r#"
rules:
  # Thinking (on by default): a valid thought frame, no procedure to keep, no new fact.
  - when: { purpose: thought }
    reply: { text: "{\"interpretation\": \"데모 요청\", \"decision\": \"answer\", \"confidence\": 0.6, \"plan\": []}" }
  - when: { purpose: reflection }
    reply: { text: "{\"write\": false}" }
  - when: { purpose: distillation }
    reply: { text: "{\"facts\": []}" }
  # K.A.R.E.N.: look the notices up, then answer from the result.
  - when: { agent: karen, last_role: user }
    reply:
      thinking: "서울 청약 공고를 SH 공고 출처에서 찾아본다."
      tool_calls: [ { name: sh_notice, arguments: { region: "서울", limit: 3 } } ]
  - when: { agent: karen, last_role: tool }
    reply:
      text: "K.A.R.E.N. 입니다. SH 공고 출처에서 서울 청약 공고를 찾았습니다. 공고 목록은 제 세션의 sh_notice 결과에 있고, 데모에서는 샘플 데이터입니다. (K.A.R.E.N. here: the Seoul notices are in the sh_notice result of my session; in the demo they are sample data.)"
      chunks: 8
  # J.A.R.V.I.S., after a tool: one answer per path of the tour.
  - when: { agent: main, last_role: tool, last_user: "(?i)청약|공고|주택|집|카렌|karen|notice" }
    reply:
      text: "K.A.R.E.N. 에게 맡겼습니다. 그녀의 답은 위 ask_agent 결과에 있고, 그녀가 찾은 공고 목록은 세션 peer-main-karen 에서 볼 수 있습니다. (I asked K.A.R.E.N.: her answer is the ask_agent result above; the notices she found are in the session peer-main-karen.) 실제 모델을 쓰려면 JARVIS_LLM__PROVIDER 와 키를 설정하세요."
      chunks: 8
  - when: { agent: main, last_role: tool, last_user: "(?i)메모|노트|저장|기록|note|memo|save" }
    reply:
      text: "메모 요청을 처리했습니다. 승인하셨다면 샌드박스의 notes/demo.txt 에 저장됐고, 거절하셨다면 저장하지 않았습니다: 위 write_file 결과가 어느 쪽인지 보여 줍니다. (Whether the note was written is in the write_file result above.)"
      chunks: 8
  - when: { agent: main, last_role: tool }
    reply:
      text: "이 세션의 샌드박스 폴더를 list_dir 로 살펴봤습니다. 결과는 위에 있습니다. (I looked at this session's sandbox with list_dir; the listing is above.)"
      chunks: 6
  # J.A.R.V.I.S., on a new message: delegate, ask to write, or use a tool.
  - when: { agent: main, last_role: user, last_user: "(?i)청약|공고|주택|집|카렌|karen|notice" }
    reply:
      thinking: "청약 공고는 K.A.R.E.N. 의 일이다. ask_agent 로 맡긴다."
      tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "서울 청약 공고를 찾아 줘" } } ]
  - when: { agent: main, last_role: user, last_user: "(?i)메모|노트|저장|기록|note|memo|save" }
    reply:
      tool_calls: [ { name: write_file, arguments: { path: "notes/demo.txt", content: "J.A.R.V.I.S. 오프라인 데모에서 남긴 메모 (a note from the offline demo)" } } ]
  - when: { agent: main, last_role: user, last_user: "(?i)도구|파일|폴더|tool|file|folder" }
    reply:
      tool_calls: [ { name: list_dir, arguments: { path: "." } } ]
fallback:
  text: "안녕하세요, J.A.R.V.I.S. 오프라인 데모입니다. 아직 모델이 설정되지 않아 짧은 각본으로 답합니다. 이렇게 말해 보세요: \"도구 써 봐\" (도구 사용), \"메모 남겨 줘\" (승인 요청), \"청약 공고 찾아 줘\" (K.A.R.E.N. 에게 위임). (Offline demo: no model is configured. Try \"use a tool\", \"save a note\" or \"ask KAREN for notices\". Set JARVIS_LLM__PROVIDER and an API key to talk to a real model.)"
  chunks: 12
"#;

/// A scripted provider; see the module docs for the script format.
#[derive(Debug)]
pub struct FauxProvider {
    rules: Vec<(CompiledWhen, FauxRule)>,
    replies: Vec<FauxReply>,
    fallback: Option<FauxReply>,
    record: bool,
    log: Option<RequestLog>,
    state: Mutex<State>,
}

/// The file requests are appended to.
#[derive(Debug)]
struct RequestLog {
    path: std::path::PathBuf,
    file: Mutex<std::fs::File>,
}

#[derive(Debug, Default)]
struct State {
    rule_fires: Vec<u32>,
    cursors: HashMap<String, usize>,
    next_call: u64,
    seen: usize,
    requests: Vec<ChatRequest>,
}

impl FauxProvider {
    /// A provider playing `script`.
    pub fn new(script: FauxScript) -> Result<Self, ProviderError> {
        script.validate()?;
        let rules = script
            .rules
            .into_iter()
            .map(|r| {
                let when = r.when.compile().map_err(ProviderError::Script)?;
                Ok((when, r))
            })
            .collect::<Result<Vec<_>, ProviderError>>()?;
        Ok(Self {
            state: Mutex::new(State {
                rule_fires: vec![0; rules.len()],
                ..State::default()
            }),
            rules,
            replies: script.replies,
            fallback: script.fallback,
            record: true,
            log: None,
        })
    }

    /// Also appends every request to the file at `path` as one JSON line
    /// (created when missing; see the module docs).
    pub fn with_request_log(mut self, path: &Path) -> Result<Self, ProviderError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                ProviderError::Config(format!("cannot open faux request log {}: {e}", path.display()))
            })?;
        self.log = Some(RequestLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        });
        Ok(self)
    }

    fn log_request(&self, request: &ChatRequest) {
        let Some(log) = &self.log else { return };
        let mut messages: Vec<serde_json::Value> = Vec::new();
        if let Some(system) = &request.system {
            messages.push(serde_json::json!({"role": "system", "content": system}));
        }
        messages.extend(request.messages.iter().map(|m| {
            let content = match m {
                super::message::Message::User(u) => u.content.clone(),
                super::message::Message::Assistant(a) => a.content.clone(),
                super::message::Message::Tool(t) => t.content.clone(),
            };
            serde_json::json!({"role": m.role(), "content": content})
        }));
        let line = serde_json::json!({
            "agent": request.metadata.agent_id,
            "session_id": request.metadata.session_id,
            "purpose": request.purpose,
            "messages": messages,
            "tools": request.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
        });
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        use std::io::Write as _;
        let mut file = log.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = file.write_all(&bytes) {
            tracing::warn!(path = %log.path.display(), error = %e, "faux: the request could not be logged");
        }
    }

    /// A provider playing the YAML script `yaml`.
    pub fn from_yaml(yaml: &str) -> Result<Self, ProviderError> {
        Self::new(FauxScript::from_yaml(yaml)?)
    }

    /// A provider playing the YAML script in the file at `path`.
    pub fn from_file(path: &Path) -> Result<Self, ProviderError> {
        let yaml = std::fs::read_to_string(path)
            .map_err(|e| ProviderError::Config(format!("cannot read faux script {}: {e}", path.display())))?;
        Self::from_yaml(&yaml).map_err(|e| match e {
            ProviderError::Script(m) => ProviderError::Script(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// The built-in offline demo.
    pub fn demo() -> Self {
        Self::from_yaml(DEMO_SCRIPT).expect("the built-in demo script is valid")
    }

    /// The script named by `JARVIS_FAUX__SCRIPT`, or the demo when it is unset.
    pub fn from_env() -> Result<Self, ProviderError> {
        match std::env::var_os(FAUX_SCRIPT_ENV) {
            Some(path) if !path.is_empty() => Self::from_file(Path::new(&path)),
            _ => Ok(Self::demo()),
        }
    }

    /// Stops recording requests (long-running demo servers need no history of them).
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.lock().requests.clone()
    }

    /// How many requests were received (also when recording is off).
    pub fn request_count(&self) -> usize {
        self.lock().seen
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pick(&self, state: &mut State, req: &ChatRequest) -> Option<FauxReply> {
        for (i, (when, rule)) in self.rules.iter().enumerate() {
            if rule.times.is_some_and(|t| state.rule_fires[i] >= t) || !when.matches(req) {
                continue;
            }
            state.rule_fires[i] += 1;
            return Some(rule.reply.clone());
        }
        let cursor = state.cursors.entry(req.metadata.session_id.clone()).or_insert(0);
        if let Some(reply) = self.replies.get(*cursor) {
            *cursor += 1;
            return Some(reply.clone());
        }
        self.fallback.clone()
    }
}

impl Provider for FauxProvider {
    fn stream(&self, request: ChatRequest) -> ProviderStream {
        self.log_request(&request);
        let mut state = self.lock();
        state.seen += 1;
        let (events, delay, chunk_delay) = match self.pick(&mut state, &request) {
            None => (
                vec![Err(ProviderError::Script(format!(
                    "the script is exhausted (session {:?}, purpose {})",
                    request.metadata.session_id, request.purpose
                )))],
                None,
                None,
            ),
            Some(reply) => (
                play(&reply, &mut state.next_call),
                reply.delay_ms,
                reply.chunk_delay_ms,
            ),
        };
        if self.record {
            state.requests.push(request);
        }
        drop(state);
        let events: ProviderStream = match chunk_delay {
            Some(ms) if ms > 0 => Box::pin(spaced_text(events, Duration::from_millis(ms))),
            _ => Box::pin(stream::iter(events)),
        };
        match delay {
            Some(ms) if ms > 0 => Box::pin(
                stream::once(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    events
                })
                .flatten(),
            ),
            _ => events,
        }
    }

    fn name(&self) -> &str {
        "faux"
    }
}

/// `events` with a pause of `gap` before every text delta but the first.
fn spaced_text(
    events: Vec<Result<ProviderEvent, ProviderError>>,
    gap: Duration,
) -> impl futures::Stream<Item = Result<ProviderEvent, ProviderError>> + Send + 'static {
    let mut seen_text = false;
    let paced: Vec<(bool, Result<ProviderEvent, ProviderError>)> = events
        .into_iter()
        .map(|event| {
            let is_text = matches!(event, Ok(ProviderEvent::TextDelta(_)));
            let wait = is_text && seen_text;
            seen_text |= is_text;
            (wait, event)
        })
        .collect();
    stream::iter(paced).then(move |(wait, event)| async move {
        if wait {
            tokio::time::sleep(gap).await;
        }
        event
    })
}

/// The events of one scripted reply.
fn play(reply: &FauxReply, next_call: &mut u64) -> Vec<Result<ProviderEvent, ProviderError>> {
    if let Some(error) = &reply.error {
        return vec![Err(error.to_provider_error())];
    }
    let mut events = Vec::new();
    if let Some(thinking) = &reply.thinking {
        events.push(Ok(ProviderEvent::ThinkingDelta {
            text: thinking.clone(),
            signature: None,
        }));
    }
    if let Some(text) = reply.text.as_deref().filter(|t| !t.is_empty()) {
        for piece in split_chars(text, reply.chunks.unwrap_or(1)) {
            events.push(Ok(ProviderEvent::TextDelta(piece)));
        }
    }
    for (index, call) in reply.tool_calls.iter().enumerate() {
        *next_call += 1;
        let arguments_delta = match &call.arguments {
            serde_json::Value::String(raw) => raw.clone(),
            other => other.to_string(),
        };
        events.push(Ok(ProviderEvent::ToolCallDelta {
            index,
            id: Some(format!("call_{next_call}")),
            name: Some(call.name.clone()),
            arguments_delta,
        }));
    }
    let reason = if reply.tool_calls.is_empty() {
        FinishReason::Stop
    } else {
        FinishReason::ToolUse
    };
    events.push(Ok(ProviderEvent::Stop {
        reason,
        usage: reply.usage.unwrap_or_default(),
    }));
    events
}

/// `text` split by characters into at most `n` pieces of nearly equal length.
fn split_chars(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let n = n.clamp(1, chars.len().max(1));
    let (base, extra) = (chars.len() / n, chars.len() % n);
    let mut pieces = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let len = base + usize::from(i < extra);
        pieces.push(chars[start..start + len].iter().collect());
        start += len;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, Role};
    use crate::request::Purpose;
    use crate::{ProviderExt, ToolSpec};
    use serde_json::json;

    fn req(session: &str, user: &str) -> ChatRequest {
        ChatRequest::new("faux", vec![Message::user(user)]).with_metadata("main", session)
    }

    #[test]
    fn splits_by_characters() {
        assert_eq!(split_chars("가나다라마", 3), vec!["가나", "다라", "마"]);
        assert_eq!(split_chars("ab", 5), vec!["a", "b"]);
        assert_eq!(split_chars("", 2), vec![""]);
    }

    #[tokio::test]
    async fn replies_have_a_cursor_per_session_then_fallback() {
        let faux = FauxProvider::new(
            FauxScript::new()
                .reply(FauxReply::text("one"))
                .reply(FauxReply::text("two"))
                .fallback(FauxReply::text("done")),
        )
        .unwrap();
        let a1 = faux.complete(req("a", "x")).await.unwrap();
        let b1 = faux.complete(req("b", "x")).await.unwrap();
        let a2 = faux.complete(req("a", "x")).await.unwrap();
        let a3 = faux.complete(req("a", "x")).await.unwrap();
        assert_eq!((a1.text.as_str(), b1.text.as_str()), ("one", "one"));
        assert_eq!((a2.text.as_str(), a3.text.as_str()), ("two", "done"));
        assert_eq!(faux.requests().len(), 4);
    }

    #[tokio::test]
    async fn rules_match_on_every_given_key_and_respect_times() {
        let faux = FauxProvider::from_yaml(
            r#"
rules:
  - when: { agent: karen, purpose: step, last_role: user, last_user: "청약", has_tools: true }
    reply: { tool_calls: [ { name: sh_notice, arguments: { region: "서울" } } ] }
    times: 1
  - when: { purpose: summary }
    reply: { text: "summary" }
"#,
        )
        .unwrap();
        let tool = ToolSpec {
            name: "sh_notice".into(),
            description: String::new(),
            parameters: json!({}),
        };
        let base = ChatRequest::new("m", vec![Message::user("청약 공고")]).with_tools(vec![tool]);
        let karen = base.clone().with_metadata("karen", "s");
        let r = faux.complete(karen.clone()).await.unwrap();
        assert_eq!(r.tool_calls[0].name, "sh_notice");
        assert_eq!(r.tool_calls[0].id, "call_1");
        assert_eq!(r.tool_calls[0].arguments, json!({"region": "서울"}));
        // `times: 1` is used up.
        assert!(faux.complete(karen.clone()).await.is_err());
        // Wrong agent, no tools, injected text: none matches the first rule.
        let main = base.clone().with_metadata("main", "s");
        assert!(faux.complete(main).await.is_err());
        let summary = karen
            .clone()
            .with_purpose(Purpose::Summary)
            .with_instruction("청약");
        assert_eq!(faux.complete(summary).await.unwrap().text, "summary");
    }

    #[tokio::test]
    async fn last_user_ignores_injected_instructions() {
        let faux = FauxProvider::new(FauxScript::new().rule(FauxRule::new(
            FauxWhen::default().last_user("^secret$"),
            FauxReply::text("hit"),
        )))
        .unwrap();
        let injected = req("s", "hello").with_instruction("secret");
        assert!(faux.complete(injected).await.is_err());
        let plain = req("s", "secret");
        assert_eq!(faux.complete(plain).await.unwrap().text, "hit");
        let tool_last = ChatRequest::new(
            "m",
            vec![
                Message::user("secret"),
                Message::Tool(crate::ToolResultMessage {
                    tool_call_id: "c".into(),
                    tool_name: "t".into(),
                    content: "r".into(),
                    is_error: false,
                }),
            ],
        );
        assert_eq!(tool_last.last_recorded_role(), Some(Role::Tool));
        assert_eq!(faux.complete(tool_last).await.unwrap().text, "hit");
    }

    #[tokio::test]
    async fn errors_carry_status_and_exhaustion_is_an_error() {
        let faux = FauxProvider::from_yaml(
            r#"
replies:
  - { error: "upstream overloaded" }
  - { error: { message: "slow down", status: 529 } }
  - { empty: true }
"#,
        )
        .unwrap();
        let e1 = faux.complete(req("s", "x")).await.unwrap_err();
        assert_eq!(e1.to_string(), "faux api error: upstream overloaded");
        let e2 = faux.complete(req("s", "x")).await.unwrap_err();
        assert!(matches!(
            e2,
            ProviderError::Api {
                status: Some(529),
                ..
            }
        ));
        assert!(faux.complete(req("s", "x")).await.unwrap().is_empty());
        let e4 = faux.complete(req("s", "x")).await.unwrap_err();
        assert!(e4.to_string().contains("exhausted"), "{e4}");
    }

    #[tokio::test(start_paused = true)]
    async fn delays_follow_tokio_time() {
        let faux = FauxProvider::from_yaml(
            "replies: [ { delay_ms: 200, text: slow, usage: { input_tokens: 12, output_tokens: 3 } } ]",
        )
        .unwrap();
        let start = tokio::time::Instant::now();
        let r = faux.complete(req("s", "x")).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(200));
        assert_eq!(
            (r.text.as_str(), r.usage.input_tokens, r.usage.output_tokens),
            ("slow", 12, 3)
        );
        // `chunk_delay_ms` spaces the text deltas after the first.
        let faux = FauxProvider::from_yaml(
            "replies: [ { delay_ms: 100, text: abc, chunks: 3, chunk_delay_ms: 500 } ]",
        )
        .unwrap();
        let start = tokio::time::Instant::now();
        let mut stream = faux.stream(req("s", "x"));
        let mut arrivals = Vec::new();
        while let Some(event) = stream.next().await {
            if let Ok(ProviderEvent::TextDelta(text)) = event {
                arrivals.push((text, start.elapsed().as_millis()));
            }
        }
        let want: Vec<(String, u128)> = vec![("a".into(), 100), ("b".into(), 600), ("c".into(), 1100)];
        assert_eq!(arrivals, want);
    }

    #[test]
    fn bad_scripts_are_clear_errors() {
        for (yaml, needle) in [
            ("replies: [ { txt: hi } ]", "unknown field"),
            ("replies: [ {} ]", "replies[0]"),
            ("replies: [ { empty: true, text: x } ]", "empty"),
            (
                "rules: [ { when: { last_user: \"(\" }, reply: { text: x } } ]",
                "rules[0].when",
            ),
            ("replies: [ { text: x, chunks: 0 } ]", "chunks"),
            ("replies: [ { error: x, text: y } ]", "error"),
            (
                "rules: [ { when: { purpose: dream }, reply: { text: x } } ]",
                "invalid script YAML",
            ),
            ("- just a list", "invalid script YAML"),
        ] {
            let err = FauxProvider::from_yaml(yaml).unwrap_err().to_string();
            assert!(err.contains(needle), "{yaml}: {err}");
        }
    }

    #[test]
    fn missing_script_file_is_a_config_error() {
        let err = FauxProvider::from_file(Path::new("/nonexistent/jarvis/script.yaml")).unwrap_err();
        assert!(matches!(err, ProviderError::Config(_)), "{err}");
    }

    #[tokio::test]
    async fn the_demo_answers_anything() {
        let faux = FauxProvider::demo();
        let r = faux.complete(req("s", "hello")).await.unwrap();
        assert!(r.text.contains("demo"));
    }
}
