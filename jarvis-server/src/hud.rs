//! The page served at `/`, embedded in the binary so the server runs from
//! anywhere. For now it is a placeholder HUD: one session's history (from
//! `GET /api/sessions/{id}`) and live conversation over the WebSocket, with
//! approvals and abort, in the session agent's colour; the full HUD
//! replaces `assets/index.html`.

use jarvis_sdk::html_escape;

/// The page, with the marker where the model notice goes.
const INDEX_HTML: &str = include_str!("../assets/index.html");
const NOTICE_MARKER: &str = "<!--JARVIS_NOTICE-->";

/// How to leave the offline demo, shown on the page while it plays.
pub const DEMO_HELP: &str = "The offline demo is playing: no model is configured. \
To talk to a real model, set JARVIS_LLM__PROVIDER (openai, anthropic, ollama) and its key \
(JARVIS_LLM__API_KEY, OPENAI_API_KEY or ANTHROPIC_API_KEY), then restart jarvis.";

/// The page, telling plainly when the demo model plays and why this model
/// was chosen (all text escaped).
pub(crate) fn index_html(demo: bool, notice: Option<&str>) -> String {
    let mut lines = Vec::new();
    if demo {
        lines.push(DEMO_HELP.to_owned());
    }
    if let Some(notice) = notice {
        lines.push(format!("Model: {notice}."));
    }
    let block = if lines.is_empty() {
        String::new()
    } else {
        let text: Vec<String> = lines.iter().map(|l| html_escape(l)).collect();
        format!(r#"<div class="notice" id="notice">{}</div>"#, text.join("<br>"))
    };
    INDEX_HTML.replacen(NOTICE_MARKER, &block, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_says_when_the_demo_plays() {
        let page = index_html(true, Some("a <b> model"));
        assert!(page.contains("offline demo is playing"));
        assert!(page.contains("a &lt;b&gt; model"));
        assert!(!index_html(false, None).contains(r#"id="notice""#));
    }
}
