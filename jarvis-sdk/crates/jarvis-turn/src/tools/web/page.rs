//! A fetched body as text for the model: what kind of content it is (from
//! the `Content-Type`, else sniffed), HTML turned into readable text with
//! `html2text` (links as numbered references, tables laid out) and the
//! page's `<title>`.

/// What a response body holds, as far as `web_fetch` cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// HTML or XHTML: turned into text.
    Html,
    /// Text, JSON, XML and the like: passed through.
    Text,
    /// Anything else (images, PDF, archives, …): refused.
    Binary,
}

/// Bytes looked at to tell a binary body from text.
const SNIFF: usize = 8 * 1024;

/// The kind of a body by its `Content-Type` (the media type, lower case,
/// without parameters); `None` when there is no usable header.
pub(super) fn kind_of_media_type(media_type: &str) -> Option<Kind> {
    let media_type = media_type.trim();
    if media_type.is_empty() {
        return None;
    }
    Some(match media_type {
        "text/html" | "application/xhtml+xml" => Kind::Html,
        t if t.starts_with("text/") => Kind::Text,
        "application/json"
        | "application/xml"
        | "application/javascript"
        | "application/x-javascript"
        | "application/ecmascript"
        | "application/yaml"
        | "application/x-yaml"
        | "application/toml"
        | "application/x-ndjson" => Kind::Text,
        t if t.ends_with("+json") || t.ends_with("+xml") => Kind::Text,
        "application/octet-stream" | "binary/octet-stream" => return None,
        _ => Kind::Binary,
    })
}

/// The kind of a body without a usable `Content-Type`: binary when it has
/// NUL bytes, HTML when it starts like a document, text otherwise.
pub(super) fn sniff(body: &[u8]) -> Kind {
    let head = &body[..body.len().min(SNIFF)];
    if head.contains(&0) {
        return Kind::Binary;
    }
    let start = String::from_utf8_lossy(&head[..head.len().min(512)]).to_ascii_lowercase();
    let start = start.trim_start_matches('\u{feff}').trim_start();
    if start.starts_with("<!doctype html") || start.starts_with("<html") || start.starts_with("<head") {
        Kind::Html
    } else {
        Kind::Text
    }
}

/// The charset a page declares, in its header or in a `<meta>` near its
/// start, lower case.
pub(super) fn declared_charset(content_type: Option<&str>, body: &[u8]) -> Option<String> {
    let from_header = content_type.and_then(|ct| {
        ct.split(';').skip(1).find_map(|param| {
            let (name, value) = param.split_once('=')?;
            (name.trim().eq_ignore_ascii_case("charset"))
                .then(|| value.trim().trim_matches('"').to_ascii_lowercase())
        })
    });
    from_header.or_else(|| {
        let head = String::from_utf8_lossy(&body[..body.len().min(4096)]).to_ascii_lowercase();
        let at = head.find("charset=")? + "charset=".len();
        let value: String = head[at..]
            .trim_start_matches(['"', '\''])
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
            .collect();
        (!value.is_empty()).then_some(value)
    })
}

/// Whether a charset name is UTF-8 or a subset of it.
pub(super) fn is_utf8_compatible(charset: &str) -> bool {
    matches!(charset, "utf-8" | "utf8" | "us-ascii" | "ascii")
}

/// HTML as `(title, text)`: the first `<title>`'s text on one line (empty
/// when there is none) and the document rendered as plain text.
pub(super) fn html_to_text(body: &[u8]) -> Result<(String, String), String> {
    let config = html2text::config::plain();
    let dom = config
        .parse_html(body)
        .map_err(|e| format!("the page could not be parsed: {e}"))?;
    let title = find_title(&dom.document).unwrap_or_default();
    let tree = config
        .dom_to_render_tree(&dom)
        .map_err(|e| format!("the page could not be read: {e}"))?;
    let text = config
        .render_to_string(tree, TEXT_WIDTH)
        .map_err(|e| format!("the page could not be rendered: {e}"))?;
    Ok((title, tidy(&text)))
}

/// Columns of the rendered text; long enough that prose is rarely wrapped.
const TEXT_WIDTH: usize = 100;

/// The text of the document's first `<title>` element outside `<svg>`.
fn find_title(node: &html2text::Handle) -> Option<String> {
    let mut stack = vec![node.clone()];
    while let Some(node) = stack.pop() {
        match node.element_name().as_deref() {
            Some("svg") => continue,
            Some("title") => {
                let mut html = Vec::new();
                node.serialize(&mut html).ok()?;
                let html = String::from_utf8_lossy(&html);
                // The serialiser escapes text as `&amp;`, `&lt;`, `&gt;` and
                // `&nbsp;`; the tags around it are the element's own.
                let inner = html
                    .split_once('>')
                    .map_or("", |(_, rest)| rest)
                    .rsplit_once("</")
                    .map_or("", |(inner, _)| inner);
                let text = inner
                    .replace("&nbsp;", " ")
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&quot;", "\"")
                    .replace("&amp;", "&");
                return Some(text.split_whitespace().collect::<Vec<_>>().join(" "));
            }
            _ => {}
        }
        let children = node.children.borrow();
        stack.extend(children.iter().rev().cloned());
    }
    None
}

/// Trailing spaces off every line and runs of blank lines down to one.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 || out.is_empty() {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.truncate(out.trim_end().len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_decide_the_kind() {
        assert_eq!(kind_of_media_type("text/html"), Some(Kind::Html));
        assert_eq!(kind_of_media_type("application/xhtml+xml"), Some(Kind::Html));
        assert_eq!(kind_of_media_type("text/plain"), Some(Kind::Text));
        assert_eq!(kind_of_media_type("application/json"), Some(Kind::Text));
        assert_eq!(kind_of_media_type("application/ld+json"), Some(Kind::Text));
        assert_eq!(kind_of_media_type("application/rss+xml"), Some(Kind::Text));
        assert_eq!(kind_of_media_type("image/png"), Some(Kind::Binary));
        assert_eq!(kind_of_media_type("application/pdf"), Some(Kind::Binary));
        assert_eq!(kind_of_media_type("application/octet-stream"), None);
        assert_eq!(kind_of_media_type(""), None);
    }

    #[test]
    fn sniffing_finds_documents_and_binaries() {
        assert_eq!(sniff(b"  <!DOCTYPE html><p>x"), Kind::Html);
        assert_eq!(sniff(b"<html><body>x"), Kind::Html);
        assert_eq!(sniff(b"just words"), Kind::Text);
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n\0\0\0"), Kind::Binary);
    }

    #[test]
    fn the_charset_comes_from_the_header_or_a_meta_tag() {
        assert_eq!(
            declared_charset(Some("text/html; charset=EUC-KR"), b""),
            Some("euc-kr".into())
        );
        assert_eq!(
            declared_charset(Some("text/html"), br#"<meta charset="utf-8">"#),
            Some("utf-8".into())
        );
        assert_eq!(
            declared_charset(
                None,
                br#"<meta http-equiv="Content-Type" content="text/html; charset=euc-kr">"#
            ),
            Some("euc-kr".into())
        );
        assert_eq!(declared_charset(None, b"<p>none</p>"), None);
    }

    #[test]
    fn html_becomes_text_with_its_title() {
        let html = br#"<!doctype html><html><head><title>
            Caf&eacute; &amp; Bar &lt;3</title><style>p{color:red}</style>
            <script>alert("no")</script></head>
            <body><svg><title>icon</title></svg><h1>Menu</h1><p>Coffee and <a href="/tea">tea</a>.</p>
            <ul><li>one</li><li>two</li></ul></body></html>"#;
        let (title, text) = html_to_text(html).unwrap();
        assert_eq!(title, "Café & Bar <3");
        assert!(text.contains("Menu"), "{text}");
        assert!(text.contains("Coffee and"), "{text}");
        assert!(text.contains("tea"), "{text}");
        assert!(text.contains("one") && text.contains("two"), "{text}");
        assert!(!text.contains("alert"), "{text}");
        assert!(!text.contains("color:red"), "{text}");
        assert!(!text.contains("<p>"), "{text}");
    }

    #[test]
    fn a_page_without_a_title_has_an_empty_one() {
        let (title, text) = html_to_text(b"<p>hello</p>").unwrap();
        assert_eq!(title, "");
        assert_eq!(text, "hello");
    }

    #[test]
    fn blank_lines_are_folded() {
        assert_eq!(tidy("\n\na  \n\n\n\nb\n\n"), "a\n\nb");
    }
}
