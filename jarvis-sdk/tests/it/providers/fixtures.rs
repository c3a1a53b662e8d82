//! Wire-transcript fixtures: `# key: value` header lines (`source`,
//! `status`, `header`, `note`), a `---` line, then the body bytes exactly as
//! the server sends them.

use jarvis_sdk::{ProviderEvent, StreamDecoder};
use std::path::PathBuf;

/// One recorded response.
#[derive(Debug, Clone)]
pub(crate) struct Fixture {
    pub(crate) name: String,
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

fn dir(provider: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(provider)
}

/// The fixture `name` of `provider`.
pub(crate) fn load(provider: &str, name: &str) -> Fixture {
    let path = dir(provider).join(format!("{name}.txt"));
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let split = raw
        .windows(5)
        .position(|w| w == b"\n---\n")
        .unwrap_or_else(|| panic!("{}: no --- line", path.display()));
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let body = raw[split + 5..].to_vec();
    let mut fixture = Fixture {
        name: name.to_owned(),
        status: 0,
        headers: Vec::new(),
        body,
    };
    let mut sources = 0;
    for line in head.lines() {
        let line = line
            .strip_prefix("# ")
            .unwrap_or_else(|| panic!("{name}: bad header line {line:?}"));
        let (key, value) = line
            .split_once(": ")
            .unwrap_or_else(|| panic!("{name}: bad header line {line:?}"));
        match key {
            "source" => {
                assert!(
                    value.starts_with("https://"),
                    "{name}: a source must be a documentation page"
                );
                sources += 1;
            }
            "status" => fixture.status = value.parse().unwrap(),
            "header" => {
                let (k, v) = value.split_once(": ").unwrap();
                fixture.headers.push((k.to_owned(), v.to_owned()));
            }
            "note" => {}
            other => panic!("{name}: unknown header key {other}"),
        }
    }
    assert!(
        sources > 0,
        "{name}: every fixture cites the documentation it follows"
    );
    assert!(fixture.status > 0, "{name}: no status");
    fixture
}

/// Every fixture of `provider`, by name.
pub(crate) fn all(provider: &str) -> Vec<Fixture> {
    let mut names: Vec<String> = std::fs::read_dir(dir(provider))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".txt").map(str::to_owned))
        .collect();
    names.sort();
    names.iter().map(|n| load(provider, n)).collect()
}

/// One line per event, then the error if the stream failed.
pub(crate) fn render(events: &[ProviderEvent], error: Option<String>) -> String {
    let mut lines: Vec<String> = events.iter().map(|e| format!("{e:?}")).collect();
    if let Some(error) = error {
        lines.push(format!("error: {error}"));
    }
    lines.join("\n")
}

/// Decodes `body` fed in the given pieces.
pub(crate) fn decode<D: StreamDecoder>(mut decoder: D, pieces: &[&[u8]]) -> String {
    let mut events = Vec::new();
    for piece in pieces {
        if let Err(e) = decoder.feed(piece, &mut events) {
            return render(&events, Some(e.to_string()));
        }
    }
    let error = decoder.finish(&mut events).err().map(|e| e.to_string());
    render(&events, error)
}

/// `body` cut at the given byte offsets (any byte, also inside a character).
pub(crate) fn split_at<'a>(body: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    points.push(0);
    points.push(body.len());
    points.sort_unstable();
    points.dedup();
    points.windows(2).map(|w| &body[w[0]..w[1]]).collect()
}
