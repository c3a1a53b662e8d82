//! External sources end to end: a loopback server plays an RSS feed, a JSON
//! document and a web page; the scheduler checks them as KAREN's built-in
//! jobs; new items reach KAREN's `default-karen` once, across a restart,
//! and a failing source shows on the AGENDA.

use jarvis_pack_housing::{HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::{Durability, EntryBody, SessionId};
use jarvis_sdk::app::{AppAssembly, AppConfig, StoreBackend, build_app};
use jarvis_sdk::common::ManualClock;
use jarvis_sdk::initiative::AgendaKind;
use jarvis_sdk::model::FauxProvider;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// What the server answers per path: status and body.
type Pages = Arc<Mutex<HashMap<String, (u16, String)>>>;

async fn server() -> (String, Pages) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let pages: Pages = Arc::default();
    let served = pages.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let pages = served.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream);
                let mut request = String::new();
                if reader.read_line(&mut request).await.unwrap_or(0) == 0 {
                    return;
                }
                let mut line = String::new();
                while reader.read_line(&mut line).await.unwrap_or(0) > 2 {
                    line.clear();
                }
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let (status, body) = pages
                    .lock()
                    .unwrap()
                    .get(&path)
                    .cloned()
                    .unwrap_or((404, String::new()));
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = reader.get_mut().write_all(reply.as_bytes()).await;
            });
        }
    });
    (base, pages)
}

fn rss(items: &[(&str, &str)]) -> String {
    let items: String = items
        .iter()
        .map(|(guid, title)| {
            format!(
                "<item><guid>{guid}</guid><title>{title}</title><link>http://example.test/{guid}</link><description>{title} 안내</description></item>"
            )
        })
        .collect();
    format!("<?xml version=\"1.0\"?><rss version=\"2.0\"><channel><title>LH</title>{items}</channel></rss>")
}

/// 2026-12-01T00:00:00Z.
fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_083_200),
    ))
}

async fn app_at(home: &Path, clock: Arc<ManualClock>) -> AppAssembly {
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: 네 }").unwrap());
    let mut config = AppConfig::embedded(home)
        .with_definition("karen", KAREN_DEFINITION)
        .with_provider(faux);
    config.store = StoreBackend::Jsonl;
    config.durability = Durability::Never;
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.memory.enabled = false;
    config.clock = clock;
    build_app(config).await.unwrap()
}

/// The source reports KAREN got, as `(message id, text)`.
pub(crate) async fn reports(app: &AppAssembly) -> Vec<(String, String)> {
    let id = SessionId::new("default-karen").unwrap();
    app.store()
        .entries(&id)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| match e.body {
            EntryBody::Proactive { message_id, text, .. } if message_id.starts_with("source-") => {
                Some((message_id, text))
            }
            _ => None,
        })
        .collect()
}

/// Advances past the next 30-minute slot and runs what is due, then lets
/// the daemon record what was queued.
pub(crate) async fn next_check(app: &AppAssembly, clock: &ManualClock) {
    clock.advance(Duration::from_secs(30 * 60));
    app.scheduler().tick().await;
    app.proactive().tick().await;
}

#[tokio::test]
async fn a_feed_reports_new_items_once_across_a_restart_and_a_failing_one_shows_on_the_agenda() {
    let (base, pages) = server().await;
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("external_sources");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("lh.yaml"),
        format!("kind: feed\nurl: {base}/feed.xml\nagent: karen\nevery: 30m\nfilter: \"청약|공고\"\n"),
    )
    .unwrap();
    std::fs::write(dir.join("broken.yaml"), "kind: feed\nurl: [not a url\n").unwrap();
    pages.lock().unwrap().insert(
        "/feed.xml".into(),
        (200, rss(&[("n1", "행복주택 청약 공고"), ("n2", "임대 공고")])),
    );
    let clock = clock();
    {
        let app = app_at(home.path(), clock.clone()).await;
        let agenda = app.agenda().await;
        let item = agenda
            .iter()
            .find(|i| i.id == "source-lh")
            .expect("the source is on the AGENDA");
        assert_eq!(item.kind, AgendaKind::Source);
        assert_eq!(item.agent_id, "karen");
        assert!(item.when.is_some(), "with the time of the next check");
        assert!(
            agenda.iter().all(|i| i.id != "source-broken"),
            "a broken file is skipped"
        );

        // The first check is a baseline: nothing is reported.
        next_check(&app, &clock).await;
        assert!(reports(&app).await.is_empty());
        // Two new items, one the filter drops.
        pages.lock().unwrap().insert(
            "/feed.xml".into(),
            (
                200,
                rss(&[
                    ("n3", "국민임대 청약 접수"),
                    ("n4", "매입임대 공고"),
                    ("n5", "주차장 안내"),
                    ("n1", "행복주택 청약 공고"),
                    ("n2", "임대 공고"),
                ]),
            ),
        );
        next_check(&app, &clock).await;
        let found = reports(&app).await;
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].1.contains("국민임대 청약 접수") && found[0].1.contains("매입임대 공고"),
            "{found:?}"
        );
        assert!(!found[0].1.contains("주차장"), "{found:?}");
        assert!(
            !found[0].1.contains("행복주택"),
            "the baseline is not reported: {found:?}"
        );
        next_check(&app, &clock).await;
        assert_eq!(reports(&app).await.len(), 1, "nothing new, nothing said");
    }
    // After a restart, the same feed reports nothing again.
    let app = app_at(home.path(), clock.clone()).await;
    next_check(&app, &clock).await;
    assert_eq!(reports(&app).await.len(), 1);
    let seen = std::fs::read_to_string(home.path().join("external_seen.jsonl")).unwrap();
    let line: serde_json::Value = serde_json::from_str(seen.lines().last().unwrap()).unwrap();
    assert_eq!(line["v"], 1);
    assert_eq!(line["source"], "lh");
    assert!(line["at"].as_str().unwrap().ends_with('Z'));

    // It fails: the AGENDA says so, and it is tried again only after a backoff.
    pages
        .lock()
        .unwrap()
        .insert("/feed.xml".into(), (500, String::new()));
    next_check(&app, &clock).await;
    let item = app
        .agenda()
        .await
        .into_iter()
        .find(|i| i.id == "source-lh")
        .unwrap();
    let detail = item.detail.unwrap_or_default();
    assert!(detail.contains("failing") && detail.contains("500"), "{detail}");
    assert_eq!(reports(&app).await.len(), 1);
}

#[tokio::test]
async fn json_and_page_sources_report_new_items_the_same_way() {
    let (base, pages) = server().await;
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("external_sources");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("api.yaml"),
        format!(
            "kind: json\nurl: {base}/data.json\nagent: karen\nevery: 30m\njson: {{items: \"$.data[*]\", id: \"id\", title: \"name\", link: \"url\", summary: \"desc\"}}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("board.yaml"),
        format!(
            "kind: page\nurl: {base}/board/list.html\nagent: karen\nevery: 30m\npage: {{selector: \"table.board tr\", link: \"a\", title: \"td.title\"}}\n"
        ),
    )
    .unwrap();
    let json = |ids: &[u32]| {
        let items: Vec<serde_json::Value> = ids
            .iter()
            .map(|i| serde_json::json!({"id": i, "name": format!("공고 {i}"), "url": format!("http://example.test/{i}"), "desc": "설명"}))
            .collect();
        serde_json::json!({ "data": items }).to_string()
    };
    let board = |rows: &[u32]| {
        let rows: String = rows
            .iter()
            .map(|i| {
                format!(
                    "<tr><td class=\"title\">게시글 {i}</td><td><a href=\"view?id={i}\">보기</a></td></tr>"
                )
            })
            .collect();
        format!("<html><body><table class=\"board\">{rows}<tr><td>헤더만</td></tr></table></body></html>")
    };
    {
        let mut p = pages.lock().unwrap();
        p.insert("/data.json".into(), (200, json(&[1])));
        p.insert("/board/list.html".into(), (200, board(&[7])));
    }
    let clock = clock();
    let app = app_at(home.path(), clock.clone()).await;
    // The first tick registers the jobs; their first slot comes next.
    let first = app.scheduler().tick().await;
    assert!(first.registered.contains(&"source-api".to_owned()), "{first:?}");
    next_check(&app, &clock).await;
    assert!(reports(&app).await.is_empty(), "baselines");
    {
        let mut p = pages.lock().unwrap();
        p.insert("/data.json".into(), (200, json(&[1, 2])));
        p.insert("/board/list.html".into(), (200, board(&[8, 7])));
    }
    next_check(&app, &clock).await;
    // One message per gap to a session: the second report waits its turn.
    assert_eq!(reports(&app).await.len(), 1);
    clock.advance(Duration::from_secs(31 * 60));
    app.proactive().tick().await;
    let found = reports(&app).await;
    assert_eq!(found.len(), 2, "{found:?}");
    let all: String = found
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(all.contains("공고 2") && !all.contains("공고 1"), "{all}");
    assert!(all.contains("게시글 8") && !all.contains("게시글 7"), "{all}");
    // The page's id is its link made absolute.
    assert!(all.contains(&format!("{base}/board/view?id=8")), "{all}");
    next_check(&app, &clock).await;
    assert_eq!(reports(&app).await.len(), 2);
}

#[tokio::test]
async fn report_existing_reports_what_the_first_check_finds() {
    let (base, pages) = server().await;
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("external_sources");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("lh.yaml"),
        format!("kind: feed\nurl: {base}/feed.xml\nagent: karen\nevery: 30m\nreport_existing: true\n"),
    )
    .unwrap();
    pages
        .lock()
        .unwrap()
        .insert("/feed.xml".into(), (200, rss(&[("n1", "행복주택 청약 공고")])));
    let clock = clock();
    let app = app_at(home.path(), clock.clone()).await;
    app.scheduler().tick().await;
    next_check(&app, &clock).await;
    let found = reports(&app).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].1.contains("행복주택 청약 공고"));
    next_check(&app, &clock).await;
    assert_eq!(reports(&app).await.len(), 1, "once");
}
