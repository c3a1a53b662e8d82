//! The HUD: the page served at `/` and the style sheet and JavaScript
//! modules it loads from `/assets/…`, all embedded in the binary with
//! `include_str!` so the server runs from anywhere and nothing is fetched
//! from elsewhere. There is no build step: the files under `assets/` are
//! what the browser runs (see ARCHITECTURE.md for what each one does).

use jarvis_sdk::html_escape;

/// The page, with the marker where the model notice goes.
const INDEX_HTML: &str = include_str!("../assets/index.html");
const NOTICE_MARKER: &str = "<!--JARVIS_NOTICE-->";

/// How to leave the offline demo, shown on the page while it plays.
pub const DEMO_HELP: &str = "The offline demo is playing: no model is configured. \
To talk to a real model, set JARVIS_LLM__PROVIDER (openai, anthropic, ollama) and its key \
(JARVIS_LLM__API_KEY, OPENAI_API_KEY or ANTHROPIC_API_KEY), then restart jarvis.";

/// What the page may load and run: only this server's own files, so text
/// that slipped into the markup could still run nothing.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
form-action 'none'; frame-ancestors 'none'";

/// One embedded file under `/assets/`.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

macro_rules! asset {
    ($path:literal, $type:literal) => {
        Asset {
            path: $path,
            content_type: $type,
            body: include_str!(concat!("../assets/", $path)),
        }
    };
}

/// Every file the page loads.
const ASSETS: &[Asset] = &[
    asset!("hud.css", "text/css; charset=utf-8"),
    asset!("js/main.js", "text/javascript; charset=utf-8"),
    asset!("js/api.js", "text/javascript; charset=utf-8"),
    asset!("js/colour.js", "text/javascript; charset=utf-8"),
    asset!("js/dom.js", "text/javascript; charset=utf-8"),
    asset!("js/reactor.js", "text/javascript; charset=utf-8"),
    asset!("js/conversation.js", "text/javascript; charset=utf-8"),
    asset!("js/panels.js", "text/javascript; charset=utf-8"),
    asset!("js/approvals.js", "text/javascript; charset=utf-8"),
];

/// The embedded file at `path` (relative to `/assets/`) and its content type.
pub(crate) fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    ASSETS
        .iter()
        .find(|a| a.path == path)
        .map(|a| (a.content_type, a.body))
}

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
        format!(
            r#"<div class="notice" id="notice" role="note">{}</div>"#,
            text.join("<br>")
        )
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

    #[test]
    fn every_file_the_page_names_is_embedded_and_nothing_comes_from_elsewhere() {
        let page = index_html(false, None);
        let mut named = Vec::new();
        for source in ASSETS.iter().map(|a| a.body).chain([page.as_str()]) {
            for quote in ['"', '\''] {
                for piece in source.split(quote).skip(1).step_by(2) {
                    if let Some(path) = piece.strip_prefix("/assets/") {
                        named.push(path.to_owned());
                    }
                    if piece.starts_with("./") && piece.ends_with(".js") {
                        named.push(format!("js/{}", &piece[2..]));
                    }
                    assert!(
                        !piece.starts_with("http://")
                            && !piece.starts_with("https://")
                            && !piece.starts_with("//"),
                        "an outside address in the HUD: {piece}"
                    );
                }
            }
        }
        assert!(named.contains(&"js/main.js".to_owned()), "{named:?}");
        for path in &named {
            assert!(asset(path).is_some(), "{path} is named but not embedded");
        }
        for a in ASSETS {
            assert!(!a.body.is_empty(), "{} is empty", a.path);
            let first = a.body.lines().next().unwrap_or_default();
            assert!(
                first.starts_with("/*") || first.starts_with("//"),
                "{} starts with a comment",
                a.path
            );
        }
    }
}
