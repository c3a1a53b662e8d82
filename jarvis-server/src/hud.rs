//! The HUD: the page served at `/` and the style sheet and JavaScript
//! modules it loads from `/assets/…`, all embedded in the binary with
//! `include_str!` so the server runs from anywhere and nothing is fetched
//! from elsewhere. There is no build step: the files under `assets/` are
//! what the browser runs (see ARCHITECTURE.md for what each one does).

use jarvis_sdk::turn::html_escape;

/// The page, with the marker where the model notice goes.
const INDEX_HTML: &str = include_str!("../assets/index.html");
const NOTICE_MARKER: &str = "<!--JARVIS_NOTICE-->";

/// How to leave the offline demo, shown on the page while it plays.
pub const DEMO_HELP: &str = "The offline demo is playing: no model is configured and no local model \
server answered. To talk to a real model, start one on this machine (Ollama, llama.cpp, LM Studio) \
or set JARVIS_LLM__PROVIDER (openai, anthropic, ollama) and its key \
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
    // The demo's help says everything the model notice would (that no
    // model is configured), so it is said once.
    let line = match (demo, notice) {
        (true, _) => Some(DEMO_HELP.to_owned()),
        (false, Some(notice)) => Some(format!("Model: {notice}.")),
        (false, None) => None,
    };
    // The first entry of the conversation's log: it scrolls away with the
    // messages instead of taking room above them.
    let block = line.map_or_else(String::new, |line| {
        format!(
            r#"<li class="notice" id="notice" role="note">{}</li>"#,
            html_escape(&line)
        )
    });
    INDEX_HTML.replacen(NOTICE_MARKER, &block, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_says_when_the_demo_plays() {
        let page = index_html(true, Some("no model; playing the offline demo"));
        assert_eq!(page.matches("offline demo").count(), 1, "said once");
        let log = page.find(r#"<ol class="log""#).unwrap();
        let notice = page.find(r#"id="notice""#).unwrap();
        assert!(
            notice > log && notice < page[log..].find("</ol>").unwrap() + log,
            "inside the log"
        );
        let page = index_html(false, Some("a <b> model"));
        assert!(page.contains("Model: a &lt;b&gt; model."));
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
