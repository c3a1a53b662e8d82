//! The embedder chosen without code (`JARVIS_EMBED__*`): a switch re-embeds
//! memories in the background while recall answers from what is already
//! embedded; an embedder that does not answer at start is kept, logged,
//! and recall still answers; `auto` finds a local embedding model and
//! keeps it across starts. Against a fake OpenAI-compatible server on
//! loopback whose vectors count words, so texts sharing words are close.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use jarvis_pack_housing::HousingPack;
use jarvis_sdk::app::{AppAssembly, AppConfig, EMBEDDER_FILE, EmbedderChoice, build_app};
use jarvis_sdk::memory::{Layer, MemoryFilter, MemoryScope, MemoryService, ReembedPhase, SectionKind};
use jarvis_sdk::model::{EmbedRoles, FauxProvider};
use jarvis_sdk::turn::Caller;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Told before the switch; its re-embedding is held while `HELD` is set.
const FACT: &str = "Seoyeon plays the cello every Tuesday evening";
const FACT_QUERY: &str = "Which instrument does Seoyeon play on Tuesday?";
/// A word of `FACT` and of no query.
const HELD: &str = "cello";
/// Told after the switch.
const KEY_FACT: &str = "The spare house key is under the blue flowerpot";
const KEY_QUERY: &str = "Where is the spare key?";
const SECRET: &str = "sk-embed-SECRET-never-written";
const DIMENSIONS: usize = 1024;

/// What the fake server received.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    authorization: Option<String>,
    body: Value,
}

struct Shared {
    seen: watch::Sender<Vec<Seen>>,
    /// Embedding requests with a text containing this word wait until it
    /// is cleared.
    held: watch::Sender<Option<&'static str>>,
    /// What `/v1/models` lists: `(id, created)`.
    models: std::sync::Mutex<Vec<(&'static str, i64)>>,
}

/// A fake OpenAI-compatible server: `POST /v1/embeddings` and `GET /v1/models`.
struct FakeServer {
    /// Its base URL, `/v1` included.
    url: String,
    shared: Arc<Shared>,
}

impl FakeServer {
    async fn start() -> FakeServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        FakeServer::serve(listener)
    }

    /// Serves on `listener`.
    fn serve(listener: tokio::net::TcpListener) -> FakeServer {
        let shared = Arc::new(Shared {
            seen: watch::Sender::new(Vec::new()),
            held: watch::Sender::new(None),
            models: std::sync::Mutex::new(vec![("chat-model", 1_700_000_000)]),
        });
        let app = Router::new()
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/models", get(models))
            .with_state(shared.clone());
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeServer { url, shared }
    }

    fn embedding_requests(&self) -> Vec<Seen> {
        self.shared
            .seen
            .borrow()
            .iter()
            .filter(|s| s.path == "/v1/embeddings")
            .cloned()
            .collect()
    }

    /// Waits (bounded) until a request embeds a text containing `word`.
    async fn wait_for_text(&self, word: &str) {
        let mut seen = self.shared.seen.subscribe();
        let found = seen.wait_for(|all| {
            all.iter()
                .any(|s| s.body["input"].as_array().is_some_and(|i| has_word(i, word)))
        });
        tokio::time::timeout(Duration::from_secs(30), found)
            .await
            .expect("the request came within 30 s")
            .unwrap();
    }
}

fn has_word(inputs: &[Value], word: &str) -> bool {
    inputs
        .iter()
        .filter_map(Value::as_str)
        .any(|t| words(t).any(|w| w == word))
}

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// One count per word, hashed (FNV-1a) into `DIMENSIONS` numbers.
fn vector(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; DIMENSIONS];
    for word in words(text) {
        let hash = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        v[(hash % DIMENSIONS as u64) as usize] += 1.0;
    }
    v
}

async fn embeddings(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Json<Value> {
    let inputs = body["input"].as_array().cloned().unwrap_or_default();
    shared.seen.send_modify(|seen| {
        seen.push(Seen {
            path: "/v1/embeddings".into(),
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: body.clone(),
        })
    });
    let mut held = shared.held.subscribe();
    held.wait_for(|word| word.is_none_or(|w| !has_word(&inputs, w)))
        .await
        .unwrap();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": vector(t.as_str().unwrap_or(""))}))
        .collect();
    Json(json!({"object": "list", "data": data, "model": body["model"]}))
}

async fn models(State(shared): State<Arc<Shared>>) -> Json<Value> {
    shared.seen.send_modify(|seen| {
        seen.push(Seen {
            path: "/v1/models".into(),
            authorization: None,
            body: Value::Null,
        })
    });
    let data: Vec<Value> = shared
        .models
        .lock()
        .unwrap()
        .iter()
        .map(|(id, created)| json!({"id": id, "object": "model", "created": created, "owned_by": "me"}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

/// The app a start with these variables builds over `home` (chat on a
/// faux model; no chat discovery).
async fn start(home: &Path, vars: &[(&str, &str)]) -> AppAssembly {
    let mut env: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    env.insert("JARVIS_HOME".into(), home.display().to_string());
    env.entry("JARVIS_LLM__DISCOVER".into())
        .or_insert_with(|| "off".into());
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: noted }").unwrap());
    let mut config = AppConfig::from_lookup(|name| env.get(name).cloned())
        .unwrap()
        .with_provider(faux);
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.agenda.model_judge = false;
    build_app(config).await.unwrap()
}

fn openai_vars(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("JARVIS_EMBED__PROVIDER", "openai".into()),
        ("JARVIS_EMBED__BASE_URL", url.into()),
        ("JARVIS_EMBED__MODEL", "fake-embed".into()),
        ("JARVIS_EMBED__API_KEY", SECRET.into()),
    ]
}

fn borrowed<'a>(vars: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn parts(app: &AppAssembly) -> (Arc<MemoryService>, MemoryScope) {
    (
        app.memory().unwrap().clone(),
        app.memory_scope("main", "default-main").unwrap(),
    )
}

/// Waits (bounded, no fixed sleeps) until re-embedding is in `phase`.
async fn until(memory: &MemoryService, phase: ReembedPhase) {
    let mut updates = memory.reembedding_updates();
    tokio::time::timeout(Duration::from_secs(30), updates.wait_for(|s| s.phase == phase))
        .await
        .unwrap_or_else(|_| panic!("re-embedding did not reach {phase:?}: {:?}", memory.reembedding()))
        .unwrap();
}

/// The key facts a turn on `query` gets.
async fn key_facts(memory: &MemoryService, scope: &MemoryScope, query: &str) -> String {
    let context = memory.observe(scope, query).await.expect("recall never fails");
    context
        .section(SectionKind::KeyFacts)
        .map(|s| s.items.join("\n"))
        .unwrap_or_default()
}

/// `(text, embedder)` of every user-profile fact.
async fn facts(memory: &MemoryService) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = memory
        .store()
        .list(&MemoryFilter::for_user("default").layer(Layer::Semantic, jarvis_sdk::memory::Agents::Any))
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.text, r.embedder))
        .collect();
    out.sort();
    out
}

fn recorded(home: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(home.join(EMBEDDER_FILE)).unwrap()).unwrap()
}

/// Tells `FACT` to an app on the hash embedder, and stops it.
async fn told_with_hash(home: &Path) {
    let app = start(home, &[]).await;
    let (memory, scope) = parts(&app);
    assert_eq!(
        recorded(home),
        json!({"v": 1, "provider": "hash", "embedder": "hash-v1-512", "requested": "hash"})
    );
    memory.remember(&scope, FACT).await.unwrap();
    assert!(key_facts(&memory, &scope, FACT_QUERY).await.contains(FACT));
    until(&memory, ReembedPhase::Done).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_told_before_switching_to_openai_is_recalled_after_the_restart_once_reembedded() {
    let server = FakeServer::start().await;
    let home = tempfile::tempdir().unwrap();
    told_with_hash(home.path()).await;

    // The switch: the old fact's re-embedding is held, so what recall does
    // meanwhile can be seen.
    server.shared.held.send_replace(Some(HELD));
    let vars = openai_vars(&server.url);
    let app = start(home.path(), &borrowed(&vars)).await;
    let (memory, scope) = parts(&app);
    assert_eq!(memory.embedder().name(), "openai/fake-embed");
    assert_eq!(app.embedder().unwrap().embedder, "openai/fake-embed");
    server.wait_for_text(HELD).await;
    assert_eq!(memory.reembedding().phase, ReembedPhase::Running);
    // A fact told meanwhile is embedded with the new embedder at once and
    // recalled; the old one, still in the hash embedder's space, is not
    // compared with the new embedder's query vectors, but its words still
    // find it.
    memory.remember(&scope, KEY_FACT).await.unwrap();
    assert!(key_facts(&memory, &scope, KEY_QUERY).await.contains(KEY_FACT));
    let meanwhile = key_facts(&memory, &scope, FACT_QUERY).await;
    assert!(meanwhile.contains(FACT), "{meanwhile}");
    assert!(
        !key_facts(&memory, &scope, "Where did I leave the umbrella?")
            .await
            .contains(FACT),
        "nothing in common, nothing recalled"
    );

    server.shared.held.send_replace(None);
    until(&memory, ReembedPhase::Done).await;
    assert_eq!(memory.reembedding().embedded, 1);
    let recalled = key_facts(&memory, &scope, FACT_QUERY).await;
    assert!(recalled.contains(FACT), "{recalled}");
    assert_eq!(
        facts(&memory).await,
        [
            (FACT.to_owned(), "openai/fake-embed".to_owned()),
            (KEY_FACT.to_owned(), "openai/fake-embed".to_owned()),
        ]
    );

    // The server was asked, with the key and the model; the file names
    // the embedder and never the key.
    let requests = server.embedding_requests();
    assert!(requests.iter().any(|r| {
        r.body["input"]
            .as_array()
            .is_some_and(|i| i.contains(&json!(FACT)))
    }));
    assert!(requests.iter().all(|r| r.body["model"] == "fake-embed"));
    assert!(
        requests
            .iter()
            .all(|r| r.authorization.as_deref() == Some(&format!("Bearer {SECRET}")))
    );
    let file = std::fs::read_to_string(home.path().join(EMBEDDER_FILE)).unwrap();
    assert!(!file.contains(SECRET), "{file}");
    assert_eq!(
        recorded(home.path()),
        json!({"v": 1, "provider": "openai", "model": "fake-embed", "base_url": server.url,
               "embedder": "openai/fake-embed", "requested": "openai"})
    );
    drop((memory, app));

    // Another start on the same settings: nothing to embed again, the
    // file as it was, the fact still recalled.
    let before = std::fs::read(home.path().join(EMBEDDER_FILE)).unwrap();
    let app = start(home.path(), &borrowed(&vars)).await;
    let (memory, scope) = parts(&app);
    until(&memory, ReembedPhase::Done).await;
    assert_eq!(memory.reembedding().embedded, 0);
    assert_eq!(std::fs::read(home.path().join(EMBEDDER_FILE)).unwrap(), before);
    assert!(key_facts(&memory, &scope, FACT_QUERY).await.contains(FACT));
    let health = app.background_health();
    assert_eq!(health["embedding"].status.as_str(), "ok", "{health:?}");
}

#[tokio::test]
async fn an_embedder_that_does_not_answer_at_start_is_kept_logged_and_recall_still_answers() {
    let home = tempfile::tempdir().unwrap();
    told_with_hash(home.path()).await;

    // A port nobody listens on (bound, then released), kept for later.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = format!("http://{addr}/v1");
    let vars = openai_vars(&url);
    let app = start(home.path(), &borrowed(&vars)).await;
    let (memory, scope) = parts(&app);
    until(&memory, ReembedPhase::Waiting).await;
    // What is logged is also in the status (the log line itself is not
    // checked: the capture is per thread, and tracing caches a callsite's
    // interest across the tests running beside this one).
    let status = memory.reembedding();
    assert!(
        status
            .error
            .as_deref()
            .is_some_and(|e| e.contains("Connection refused")),
        "{status:?}"
    );
    // No switch: the configured embedder stays, named in the file.
    assert_eq!(memory.embedder().name(), "openai/fake-embed");
    assert_eq!(recorded(home.path())["provider"], "openai");
    let health = app.background_health();
    assert_eq!(health["embedding"].status.as_str(), "restarting", "{health:?}");
    assert!(health["embedding"].failures >= 1);

    // Recall answers by the query's words alone (it has no vector), a turn
    // runs, and a fact told now is kept for later.
    assert!(key_facts(&memory, &scope, FACT_QUERY).await.contains(FACT));
    let session = app.default_session("main").await.unwrap();
    let session = app.session(&session.id).await.unwrap();
    let outcome = session.prompt(FACT_QUERY, Caller::Local).await.unwrap();
    assert_eq!(outcome.final_message.content, "noted");
    memory.remember(&scope, KEY_FACT).await.unwrap();
    let stored = facts(&memory).await;
    assert!(
        stored.contains(&(FACT.to_owned(), "hash-v1-512".to_owned())),
        "{stored:?}"
    );
    assert!(
        stored.contains(&(KEY_FACT.to_owned(), String::new())),
        "{stored:?}"
    );
    drop((memory, session, app));

    // The server answers again at the next start: everything is embedded
    // with it and recalled.
    let server = FakeServer::serve(tokio::net::TcpListener::bind(addr).await.unwrap());
    let app = start(home.path(), &borrowed(&vars)).await;
    let (memory, scope) = parts(&app);
    until(&memory, ReembedPhase::Done).await;
    assert!(key_facts(&memory, &scope, FACT_QUERY).await.contains(FACT));
    assert!(key_facts(&memory, &scope, KEY_QUERY).await.contains(KEY_FACT));
    assert!(!server.embedding_requests().is_empty());
    let turns = facts(&memory).await;
    assert!(turns.iter().all(|(_, e)| e == "openai/fake-embed"), "{turns:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_takes_a_local_embedding_model_and_keeps_it_across_starts() {
    let home = tempfile::tempdir().unwrap();
    // Nothing found: the hash embedder, said in the file as auto's.
    let nobody = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", listener.local_addr().unwrap())
    };
    let spec = format!("openai={nobody}");
    let app1 = start(
        home.path(),
        &[
            ("JARVIS_EMBED__PROVIDER", "auto"),
            ("JARVIS_LLM__DISCOVER", &spec),
        ],
    )
    .await;
    assert_eq!(app1.memory().unwrap().embedder().name(), "hash-v1-512");
    assert_eq!(recorded(home.path())["requested"], "auto");
    drop(app1);

    let server = FakeServer::start().await;
    server
        .shared
        .models
        .lock()
        .unwrap()
        .push(("nomic-embed-text", 1_700_000_100));
    let spec = format!("openai={}", server.url);
    let vars = [
        ("JARVIS_EMBED__PROVIDER", "auto"),
        ("JARVIS_LLM__DISCOVER", spec.as_str()),
    ];
    let app2 = start(home.path(), &vars).await;
    let (memory, _) = parts(&app2);
    // nomic is asymmetric: documents go with `search_document: `, which
    // names the space.
    let nomic = format!(
        "openai/nomic-embed-text+{}",
        EmbedRoles::for_model("nomic-embed-text").space_suffix().unwrap()
    );
    assert_eq!(memory.embedder().name(), nomic);
    assert_eq!(
        recorded(home.path()),
        json!({"v": 1, "provider": "openai", "model": "nomic-embed-text", "base_url": server.url,
               "embedder": nomic, "requested": "auto"})
    );
    until(&memory, ReembedPhase::Done).await;
    drop((memory, app2));

    // A newer embedding model appears: auto keeps what it chose, without
    // asking the server again.
    server
        .shared
        .models
        .lock()
        .unwrap()
        .push(("bge-m3", 1_800_000_000));
    let listings = |s: &FakeServer| {
        s.shared
            .seen
            .borrow()
            .iter()
            .filter(|r| r.path == "/v1/models")
            .count()
    };
    let asked = listings(&server);
    let app3 = start(home.path(), &vars).await;
    assert_eq!(app3.memory().unwrap().embedder().name(), nomic);
    assert_eq!(listings(&server), asked, "no discovery for a kept choice");
    let choice: EmbedderChoice = app3.embedder().unwrap().clone();
    assert_eq!(choice.requested, "auto");
}

#[test]
fn unknown_embedders_are_clear_configuration_errors() {
    let home = tempfile::tempdir().unwrap();
    let error = AppConfig::from_lookup(|name| match name {
        "JARVIS_HOME" => Some(home.path().display().to_string()),
        "JARVIS_EMBED__PROVIDER" => Some("cohere".into()),
        _ => None,
    })
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("JARVIS_EMBED__PROVIDER=cohere") && error.contains("hash, openai, ollama or auto"),
        "{error}"
    );
}
