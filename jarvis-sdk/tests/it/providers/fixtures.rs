//! Wire-transcript fixtures: `# key: value` header lines (`source`,
//! `status`, `header`, `note`), a `---` line, then the body bytes exactly as
//! the server sends them.

use futures::StreamExt;
use jarvis_sdk::model::{ChatRequest, Provider, ProviderEvent, StreamDecoder};
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

/// Transcripts with a 200 status: streams to decode.
pub(crate) fn streamed(provider: &str) -> Vec<Fixture> {
    all(provider)
        .into_iter()
        .filter(|f| f.status == 200 && !f.name.starts_with("embed"))
        .collect()
}

/// Every streamed transcript of `provider` decodes to its snapshot.
#[track_caller]
pub(crate) fn check_snapshots<D: StreamDecoder>(provider: &str, make: impl Fn() -> D) {
    for f in streamed(provider) {
        let rendered = decode(make(), &[&f.body]);
        insta::assert_snapshot!(format!("{provider}__{}", f.name), rendered);
    }
}

/// Every streamed transcript, cut at random byte offsets (inside characters,
/// inside `data:` lines), decodes exactly as when fed whole.
pub(crate) fn check_random_splits<D: StreamDecoder>(provider: &str, make: impl Fn() -> D) {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let all = streamed(provider);
    let wholes: Vec<String> = all.iter().map(|f| decode(make(), &[&f.body])).collect();
    let mut runner = TestRunner::new(Config {
        cases: 64 * all.len() as u32,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &(0..all.len(), prop::collection::vec(any::<usize>(), 0..40)),
            |(i, cuts)| {
                let pieces = split_at(&all[i].body, &cuts);
                prop_assert_eq!(decode(make(), &pieces), wholes[i].clone(), "{}", all[i].name);
                Ok(())
            },
        )
        .unwrap();
}

/// One transcript cut at every byte offset, and fed one byte at a time.
pub(crate) fn check_every_split<D: StreamDecoder>(provider: &str, name: &str, make: impl Fn() -> D) {
    let f = load(provider, name);
    let whole = decode(make(), &[&f.body]);
    for cut in 0..=f.body.len() {
        assert_eq!(
            decode(make(), &split_at(&f.body, &[cut])),
            whole,
            "{name}: cut at {cut}"
        );
    }
    let bytes: Vec<&[u8]> = f.body.chunks(1).collect();
    assert_eq!(decode(make(), &bytes), whole, "{name}: one byte at a time");
}

/// Runs one call through `provider` and renders what it streamed.
pub(crate) async fn collect(provider: &dyn Provider, request: ChatRequest) -> String {
    let mut stream = provider.stream(request);
    let mut events: Vec<ProviderEvent> = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(e) => events.push(e),
            Err(e) => return render(&events, Some(e.to_string())),
        }
    }
    render(&events, None)
}
