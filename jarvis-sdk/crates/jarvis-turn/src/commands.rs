//! The slash-command hook of a turn (SPEC.md §17.1 #12): a message that
//! starts with `/` and a word of ASCII letters followed by a space or the
//! end (`/remember 내 생일은 3월 2일`, `/help`) is offered to the session's
//! [`SlashCommands`] before the model; `/tmp/a.txt 읽어 줘` is not a command.
//! A command's reply is shown like an answer but is not recorded in the
//! session, so it never enters the model's window. The standard commands
//! live in the initiative layer (`jarvis_initiative::StandardCommands`).

use async_trait::async_trait;

/// Who typed the command.
#[derive(Debug, Clone, Copy)]
pub struct CommandContext<'a> {
    /// The session's agent (a job made with `/schedule` gets it, R-SCHED-2).
    pub agent_id: &'a str,
    /// The session.
    pub session_id: &'a str,
}

/// Answers slash commands for a session.
#[async_trait]
pub trait SlashCommands: Send + Sync {
    /// The reply to `text` when it is a command; `None` lets it go to the
    /// model as an ordinary message.
    async fn handle(&self, ctx: &CommandContext<'_>, text: &str) -> Option<String>;
}

/// Splits `/name rest` into the lower-cased name and the trimmed rest, or
/// `None` when `text` is not a command.
pub fn parse_command(text: &str) -> Option<(String, &str)> {
    let body = text.trim_start().strip_prefix('/')?;
    let end = body.find(char::is_whitespace).unwrap_or(body.len());
    let name = &body[..end];
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphabetic()) {
        return None;
    }
    Some((name.to_ascii_lowercase(), body[end..].trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_slash_and_a_word_make_a_command() {
        assert_eq!(
            parse_command("/remember 생일은 3월 2일"),
            Some(("remember".into(), "생일은 3월 2일"))
        );
        assert_eq!(parse_command("  /HELP"), Some(("help".into(), "")));
        assert_eq!(parse_command("/agenda\n"), Some(("agenda".into(), "")));
        for not in [
            "/tmp/a.txt 읽어 줘",
            "/ remember",
            "remember /x",
            "/123",
            "//help",
            "/é",
            "",
        ] {
            assert_eq!(parse_command(not), None, "{not:?}");
        }
    }
}
