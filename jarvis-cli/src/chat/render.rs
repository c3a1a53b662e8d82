//! Drawing a session's messages in a terminal: streamed text, thinking
//! dimmed, tool activity with a spinner, approval questions. On a pipe the
//! same appears as plain lines (no colours, no spinner, thinking labelled).

use jarvis_sdk::agent::{AgentEvent, ApprovalRequest, MessageDelta, ProactiveKind, StopReason};
use jarvis_sdk::initiative::{FocusPhase, FocusState, FocusStepStatus};
use jarvis_server::protocol::{ServerMessage, ServerNotice, codes};
use std::io::{IsTerminal, Write};

const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";
const CLEAR_LINE: &str = "\r\x1b[2K";
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// What the cursor is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// At the start of a line.
    Fresh,
    /// After answer text.
    Text,
    /// After thinking text.
    Thinking,
    /// After a question waiting for an answer.
    Question,
}

/// Writes messages to the terminal.
pub(crate) struct Renderer {
    /// The answer text goes here (stdout).
    answer: Box<dyn Write + Send>,
    /// Everything else goes here (stdout in chat, stderr in `ask`).
    info: Box<dyn Write + Send>,
    /// Whether `info` is a terminal: colours, spinner and the input prompt.
    tty: bool,
    line: Line,
    /// The tools running now, for the spinner.
    running: Vec<String>,
    frame: usize,
    /// Sub-agents' streamed text not shown yet, by run (parent call id and
    /// path): shown indented, a line at a time, when the run moves on.
    sub_text: std::collections::BTreeMap<String, String>,
}

impl Renderer {
    /// Chat: everything on stdout.
    pub(crate) fn chat() -> Self {
        let tty = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Self::new(Box::new(std::io::stdout()), Box::new(std::io::stdout()), tty)
    }

    /// One question: the answer on stdout, the rest on stderr.
    pub(crate) fn ask() -> Self {
        let tty = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Self::new(Box::new(std::io::stdout()), Box::new(std::io::stderr()), tty)
    }

    fn new(answer: Box<dyn Write + Send>, info: Box<dyn Write + Send>, tty: bool) -> Self {
        Self {
            answer,
            info,
            tty,
            line: Line::Fresh,
            running: Vec::new(),
            frame: 0,
            sub_text: std::collections::BTreeMap::new(),
        }
    }

    /// Whether the spinner turns (a tool runs, on a terminal, and no
    /// question waits on the line).
    pub(crate) fn spinning(&self) -> bool {
        self.tty && !self.running.is_empty() && self.line != Line::Question
    }

    /// Ends the current line, whatever it holds.
    fn fresh(&mut self) {
        if self.spinning() {
            let _ = write!(self.info, "{CLEAR_LINE}");
            return;
        }
        match self.line {
            Line::Fresh => {}
            Line::Text => {
                let _ = writeln!(self.answer);
            }
            Line::Thinking => {
                let _ = writeln!(self.info, "{}", if self.tty { RESET } else { "" });
            }
            Line::Question => {
                let _ = writeln!(self.info);
            }
        }
        self.line = Line::Fresh;
    }

    fn flush(&mut self) {
        let _ = self.answer.flush();
        let _ = self.info.flush();
    }

    /// A line of its own in `info`, indented.
    pub(crate) fn note(&mut self, text: &str) {
        self.fresh();
        let _ = writeln!(self.info, "  {text}");
        self.redraw_spinner();
        self.flush();
    }

    /// The input prompt, on a terminal.
    pub(crate) fn input_prompt(&mut self) {
        if self.tty {
            self.fresh();
            let _ = write!(self.info, "› ");
            self.line = Line::Question;
            self.flush();
        }
    }

    /// Asks a person to decide an approval request.
    pub(crate) fn ask_approval(&mut self, request: &ApprovalRequest) {
        self.fresh();
        let _ = write!(
            self.info,
            "  ? {} wants to run {} {}. Allow? [y]es / [a]lways / [n]o: ",
            request.agent_id,
            request.tool_name,
            short(&request.args.to_string(), 200)
        );
        self.line = Line::Question;
        self.flush();
    }

    /// The spinner's next frame.
    pub(crate) fn tick(&mut self) {
        self.frame = self.frame.wrapping_add(1);
        self.redraw_spinner();
        self.flush();
    }

    fn redraw_spinner(&mut self) {
        if self.spinning() {
            let spinner = SPINNER[self.frame % SPINNER.len()];
            let _ = write!(self.info, "{CLEAR_LINE}  {spinner} {}…", self.running.join(", "));
        }
    }

    /// Draws one message.
    pub(crate) fn show(&mut self, message: &ServerMessage) {
        match message {
            ServerMessage::Event(event) => self.event(event),
            ServerMessage::Notice(notice) => match notice {
                ServerNotice::ApprovalResolved { request_id, decision } => {
                    let _ = request_id;
                    let decision = serde_json::to_value(decision)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default();
                    self.note(&format!("→ {decision}"));
                }
                // Refusals of the input were shown as `input_rejected`.
                ServerNotice::Error { code, .. }
                    if [codes::INVALID_INPUT, codes::FORBIDDEN, codes::UNAUTHORIZED]
                        .contains(&code.as_str()) => {}
                ServerNotice::Error { message, .. } => self.note(&format!("! {message}")),
                _ => {}
            },
            ServerMessage::Other(_) => {}
        }
        self.flush();
    }

    fn event(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::AgentStart { agent_name, .. } => {
                self.fresh();
                let _ = write!(self.info, "{agent_name} › ");
                let _ = self.info.flush();
                // The answer follows on the same line.
                self.line = Line::Text;
            }
            AgentEvent::MessageUpdate { delta } => match delta {
                MessageDelta::TextDelta(text) => {
                    if self.line != Line::Text {
                        self.fresh();
                    }
                    let _ = write!(self.answer, "{text}");
                    self.line = Line::Text;
                }
                MessageDelta::ThinkingDelta(text) => {
                    if self.line != Line::Thinking {
                        self.fresh();
                        let _ = write!(self.info, "{}", if self.tty { DIM } else { "[thinking] " });
                    }
                    let _ = write!(self.info, "{text}");
                    self.line = Line::Thinking;
                }
            },
            AgentEvent::ToolExecutionStart { tool_name, args, .. } => {
                self.fresh();
                if self.tty {
                    self.running.push(tool_name.clone());
                    self.redraw_spinner();
                } else {
                    let _ = writeln!(self.info, "  · {tool_name} {}", short(&args.to_string(), 200));
                }
            }
            AgentEvent::ToolExecutionEnd {
                tool_name,
                is_error,
                result,
                ..
            } => {
                self.fresh();
                if let Some(i) = self.running.iter().position(|t| t == tool_name) {
                    self.running.remove(i);
                }
                let first = result.lines().next().unwrap_or_default();
                if *is_error {
                    let _ = writeln!(self.info, "  ✗ {tool_name}: {}", short(first, 200));
                } else if first.trim().is_empty() {
                    let _ = writeln!(self.info, "  ✓ {tool_name}");
                } else {
                    let _ = writeln!(self.info, "  ✓ {tool_name}: {}", short(first, 200));
                }
                self.redraw_spinner();
            }
            AgentEvent::AgentError { message } => self.note(&format!("! {message}")),
            AgentEvent::InputRejected { message } => self.note(&format!("! {message}")),
            AgentEvent::ProactiveMessage { text, kind, .. } => match kind {
                // A filler or acknowledgement: said in passing.
                ProactiveKind::Filler => self.note(&format!("… {text}")),
                // A reminder or a watch result the agent brings up itself.
                ProactiveKind::Proactive => self.note(&format!("» {text}")),
                // The answer of a job that went on in the background.
                ProactiveKind::Answer => {
                    self.fresh();
                    let _ = writeln!(self.answer, "{text}");
                }
            },
            AgentEvent::AgentEnd { final_message, .. } => {
                self.running.clear();
                self.sub_text.clear();
                self.fresh();
                if final_message.stop_reason == StopReason::Aborted {
                    self.note("(aborted)");
                }
            }
            AgentEvent::SubagentEvent {
                parent_tool_call_id,
                agent_path,
                event,
            } => self.subagent(parent_tool_call_id, agent_path, event),
            AgentEvent::Notice(_) => {
                let Some(FocusState {
                    task_id,
                    title,
                    steps,
                    current,
                    state,
                    ..
                }) = event.as_notice()
                else {
                    return;
                };
                let finished = steps
                    .iter()
                    .filter(|s| s.status != FocusStepStatus::Pending && s.status != FocusStepStatus::Active)
                    .count();
                let now = match (state, current) {
                    (FocusPhase::Done, _) => "done".to_owned(),
                    (_, Some(i)) => format!("now: {}", steps.get(i).map_or("", |s| s.title.as_str())),
                    (_, None) => "every step finished".to_owned(),
                };
                self.note(&format!(
                    "◆ FOCUS {task_id} {title} · {finished}/{} · {now}",
                    steps.len()
                ));
            }
            _ => {}
        }
    }

    /// A sub-agent's event: indented under its parent's tool call, one
    /// step per level, in `info` (never with the answer: `jarvis ask`
    /// prints only the turn's own answer on stdout).
    fn subagent(&mut self, call_id: &str, path: &[String], event: &AgentEvent) {
        let indent = "  ".repeat(path.len().max(2));
        let name = path.last().map(String::as_str).unwrap_or("sub-agent");
        let run = format!("{call_id}/{}", path.join("."));
        match event {
            AgentEvent::AgentStart { .. } => {
                self.fresh();
                let _ = writeln!(self.info, "{indent}↳ {name}");
            }
            AgentEvent::MessageUpdate {
                delta: MessageDelta::TextDelta(text),
            } => self.sub_text.entry(run).or_default().push_str(text),
            AgentEvent::ToolExecutionStart { tool_name, args, .. } => {
                self.sub_lines(&run, &indent);
                let _ = writeln!(
                    self.info,
                    "{indent}  · {tool_name} {}",
                    short(&args.to_string(), 160)
                );
            }
            AgentEvent::ToolExecutionEnd {
                tool_name,
                is_error,
                result,
                ..
            } => {
                self.fresh();
                let mark = if *is_error { '✗' } else { '✓' };
                let first = result.lines().next().unwrap_or_default();
                let _ = writeln!(self.info, "{indent}  {mark} {tool_name}: {}", short(first, 160));
            }
            AgentEvent::AgentEnd { final_message, .. } => {
                self.sub_lines(&run, &indent);
                if final_message.stop_reason == StopReason::Aborted {
                    let _ = writeln!(self.info, "{indent}  (aborted)");
                }
            }
            AgentEvent::AgentError { message } => {
                self.fresh();
                let _ = writeln!(self.info, "{indent}  ! {message}");
            }
            _ => {}
        }
        self.redraw_spinner();
    }

    /// Shows the run's streamed text so far, indented.
    fn sub_lines(&mut self, run: &str, indent: &str) {
        self.fresh();
        if let Some(text) = self.sub_text.remove(run) {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let _ = writeln!(self.info, "{indent}  {}", short(line, 300));
            }
        }
    }
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max).collect();
        cut.push('…');
        cut
    }
}
