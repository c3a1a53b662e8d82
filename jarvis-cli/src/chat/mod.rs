//! `jarvis chat` and `jarvis ask`: talk to one session in the terminal.
//!
//! Lines read from stdin are queued: when no turn runs, the next line is a
//! prompt (`/quit` or end of input leaves); while an approval request
//! waits, the next line answers it (`y`, `a`, `n`). So piped input works
//! the same as typing ahead. Ctrl-C aborts the running turn, never the
//! program; at end of input the chat waits for the running turn, denies
//! approvals nobody can answer any more, and leaves. `ask` sends one prompt
//! and leaves after its turn; it reads stdin only for approvals, and only
//! from a terminal.

mod backend;
mod render;

use jarvis_sdk::agent::{AgentEvent, ApprovalRequest, StopReason};
use jarvis_server::client::Incoming;
use jarvis_server::protocol::{ClientDecision, ClientMessage, ServerMessage, ServerNotice, codes};
use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;
use std::time::Duration;
use tokio::sync::mpsc;

use crate::Target;
use backend::Backend;
use render::Renderer;

/// Where the conversation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Nothing runs; the next line is a prompt.
    Idle,
    /// A prompt was sent; its turn has not started yet.
    Sent,
    /// A turn runs.
    Running,
}

/// Runs the chat; with `once`, sends that prompt and leaves after its turn.
pub(crate) async fn run(target: Target, once: Option<String>) -> anyhow::Result<ExitCode> {
    let home = crate::home::open().await?;
    if let crate::home::Home::Local(app) = &home {
        crate::home::settle_memory(app).await;
    }
    let ask = once.is_some();
    // A one-shot question starts no background work: reminders belong to a
    // conversation someone is there to see.
    let mut backend = Backend::open(home, &target, !ask).await?;
    let mut out = if ask { Renderer::ask() } else { Renderer::chat() };
    let read_stdin = !ask || std::io::stdin().is_terminal();
    let mut lines = if read_stdin { stdin_lines() } else { closed_lines() };
    let mut interrupts = interrupts();
    let mut ticker = tokio::time::interval(Duration::from_millis(100));

    let mut queue: VecDeque<String> = once.into_iter().collect();
    let mut stdin_open = read_stdin;
    let mut turn = Turn::Idle;
    let mut turns_done = 0u32;
    let mut failed = false;
    let mut approvals: VecDeque<ApprovalRequest> = VecDeque::new();
    let mut asked: Option<String> = None;
    let mut prompted = false;

    loop {
        // What to do with the queued input.
        if turn == Turn::Idle {
            if ask && turns_done > 0 {
                break;
            }
            match queue.pop_front() {
                Some(line) => {
                    let text = line.trim();
                    if text == "/quit" || text == "/exit" {
                        break;
                    }
                    if !text.is_empty() {
                        backend
                            .send(ClientMessage::Prompt {
                                text: text.to_owned(),
                            })
                            .await?;
                        turn = Turn::Sent;
                    }
                    prompted = false;
                    continue;
                }
                None if !stdin_open => break,
                None if !prompted => {
                    out.input_prompt();
                    prompted = true;
                }
                None => {}
            }
        }
        if let Some(request) = approvals.front() {
            if asked.as_deref() != Some(request.request_id.as_str()) {
                out.ask_approval(request);
                asked = Some(request.request_id.clone());
            }
            let answer = match queue.pop_front() {
                Some(line) => match parse_decision(&line) {
                    Some(decision) => Some(decision),
                    None => {
                        out.note("answer y (allow once), a (always allow) or n (deny)");
                        asked = None;
                        continue;
                    }
                },
                None if !stdin_open => {
                    out.note("no one can answer any more: denied");
                    Some(ClientDecision::Deny)
                }
                None => None,
            };
            if let Some(decision) = answer {
                let request_id = request.request_id.clone();
                approvals.pop_front();
                asked = None;
                backend
                    .send(ClientMessage::Approval { request_id, decision })
                    .await?;
                continue;
            }
        }

        tokio::select! {
            line = lines.recv(), if stdin_open => match line {
                Some(line) => queue.push_back(line),
                None => stdin_open = false,
            },
            incoming = backend.recv() => {
                let message = match incoming {
                    Some(Incoming::Message(message)) => message,
                    Some(Incoming::Closed { code, reason }) => {
                        out.note(&format!("! the server closed the connection ({} {reason})", code.unwrap_or(0)));
                        return Ok(ExitCode::FAILURE);
                    }
                    None => break,
                };
                out.show(&message);
                match &message {
                    ServerMessage::Event(AgentEvent::AgentStart { .. }) => turn = Turn::Running,
                    ServerMessage::Event(AgentEvent::AgentEnd { final_message, .. }) => {
                        turn = Turn::Idle;
                        turns_done += 1;
                        failed |= final_message.stop_reason == StopReason::Error;
                        approvals.clear();
                        asked = None;
                    }
                    ServerMessage::Event(AgentEvent::InputRejected { .. }) if turn == Turn::Sent => {
                        turn = Turn::Idle;
                        turns_done += 1;
                        failed = true;
                    }
                    // Refusals arrive as `input_rejected` too; other errors
                    // (busy, shutting down) mean the prompt did not run.
                    ServerMessage::Notice(ServerNotice::Error { code, .. })
                        if turn == Turn::Sent
                            && ![codes::INVALID_INPUT, codes::FORBIDDEN, codes::UNAUTHORIZED, codes::APPROVAL_NOT_PENDING]
                                .contains(&code.as_str()) =>
                    {
                        turn = Turn::Idle;
                        turns_done += 1;
                        failed = true;
                    }
                    ServerMessage::Notice(ServerNotice::ApprovalRequest(request)) => approvals.push_back(request.clone()),
                    ServerMessage::Notice(ServerNotice::ApprovalResolved { request_id, .. }) => {
                        approvals.retain(|r| &r.request_id != request_id);
                        if asked.as_deref() == Some(request_id.as_str()) {
                            asked = None;
                        }
                    }
                    _ => {}
                }
            },
            Some(()) = interrupts.recv() => {
                if turn == Turn::Idle {
                    out.note("(Ctrl-C aborts a running turn; Ctrl-D or /quit leaves)");
                    prompted = false;
                } else {
                    out.note("^C aborting the turn…");
                    backend.send(ClientMessage::Abort).await?;
                }
            },
            _ = ticker.tick(), if out.spinning() => out.tick(),
        }
    }
    backend.finish().await;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn parse_decision(line: &str) -> Option<ClientDecision> {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(ClientDecision::Allow),
        "a" | "always" => Some(ClientDecision::Always),
        "n" | "no" => Some(ClientDecision::Deny),
        _ => None,
    }
}

/// Lines of stdin, read on a thread of their own (a blocking read must not
/// hold the runtime when the chat ends); `None` at end of input.
fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// No input at all.
fn closed_lines() -> mpsc::Receiver<String> {
    mpsc::channel(1).1
}

/// One message per Ctrl-C (SIGINT); the program itself is not stopped.
/// The handler is in place when this returns.
fn interrupts() -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel(4);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut sigint) = signal(SignalKind::interrupt()) {
            tokio::spawn(async move {
                while sigint.recv().await.is_some() {
                    if tx.send(()).await.is_err() {
                        break;
                    }
                }
            });
        }
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if tx.send(()).await.is_err() {
                break;
            }
        }
    });
    rx
}
