//! The OpenAI-compatible and Ollama embedders against a local server
//! replaying their wire transcripts: request bodies, ordering, batching,
//! errors, retries and malformed answers.

use jarvis_sdk::model::{
    ApiKey, EmbedRole, EmbedRoles, Embedder, EmbedderExt, HttpSettings, OllamaEmbedder, OllamaEmbedderConfig,
    OpenAiEmbedder, OpenAiEmbedderConfig, ProviderError, RetryPolicy,
};
use std::sync::Arc;
use std::time::Duration;

use crate::providers::fixtures;
use crate::providers::replay::{RecordingSleeper, Replay, Reply};

const SECRET: &str = "sk-test-SECRET-never-logged";

fn settings(sleeper: Arc<RecordingSleeper>) -> HttpSettings {
    HttpSettings {
        sleeper,
        ..HttpSettings::default()
    }
}

fn openai(url: &str, sleeper: Arc<RecordingSleeper>) -> OpenAiEmbedder {
    let mut config = OpenAiEmbedderConfig::new(Some(ApiKey::new(SECRET)))
        .with_base_url(format!("{url}/v1"))
        .with_dimensions(4);
    config.http = settings(sleeper);
    OpenAiEmbedder::new(config).unwrap()
}

fn ollama(url: &str, sleeper: Arc<RecordingSleeper>) -> OllamaEmbedder {
    let mut config = OllamaEmbedderConfig::default().with_base_url(url);
    config.http = settings(sleeper);
    OllamaEmbedder::new(config).unwrap()
}

fn replies(dir: &str, names: &[&str]) -> Vec<Reply> {
    names.iter().map(|n| fixtures::load(dir, n).into()).collect()
}

fn texts(items: &[&str]) -> Vec<String> {
    items.iter().map(|t| t.to_string()).collect()
}

fn assert_unit(v: &[f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "{v:?} has length {norm}");
}

fn assert_close(got: &[f32], expected: &[f32]) {
    assert_eq!(got.len(), expected.len(), "{got:?}");
    for (g, e) in got.iter().zip(expected) {
        assert!((g - e).abs() < 1e-6, "{got:?} != {expected:?}");
    }
}

#[tokio::test]
async fn openai_sends_one_request_per_batch_and_keeps_text_order() {
    let replay = Replay::start(replies("embed_openai", &["two_texts", "one_text"])).await;
    let mut config = OpenAiEmbedderConfig::new(Some(ApiKey::new(SECRET)))
        .with_base_url(format!("{}/v1/", replay.url))
        .with_dimensions(4);
    config.batch_size = 2;
    let embedder: Arc<dyn Embedder> = Arc::new(OpenAiEmbedder::new(config).unwrap());
    assert_eq!(embedder.name(), "openai/text-embedding-3-small/4");
    assert_eq!(embedder.dimensions(), Some(4));
    // The blank text is not sent (the API rejects empty input): it gets zeros.
    let vectors = embedder
        .embed(
            texts(&["서울 공고", "  ", "housing notice", "대출 금리"]),
            EmbedRole::Document,
        )
        .await
        .unwrap();
    assert_eq!(vectors.len(), 4);
    assert_close(&vectors[0], &[0.5, -0.5, 0.5, -0.5]);
    assert_eq!(vectors[1], [0.0; 4]);
    assert_close(&vectors[2], &[0.0, 0.6, 0.0, 0.8]);
    assert_close(&vectors[3], &[1.0, 0.0, 0.0, 0.0]);
    let requests = replay.requests();
    assert_eq!(requests.len(), 2, "four texts, one blank, batches of two");
    for r in &requests {
        assert_eq!(r.path, "/v1/embeddings");
        assert_eq!(r.headers["authorization"], format!("Bearer {SECRET}"));
    }
    let bodies: Vec<serde_json::Value> = requests.into_iter().map(|r| r.body).collect();
    insta::assert_snapshot!(
        "openai_embed_requests",
        serde_json::to_string_pretty(&bodies).unwrap()
    );
}

#[tokio::test]
async fn openai_orders_by_index_and_normalises() {
    let replay = Replay::start(replies("embed_openai", &["out_of_order"])).await;
    let mut config = OpenAiEmbedderConfig::new(None)
        .with_base_url(&replay.url)
        .with_model("local");
    config.http = settings(Arc::default());
    let embedder = OpenAiEmbedder::new(config).unwrap();
    assert_eq!(embedder.name(), "openai/local");
    assert_eq!(embedder.dimensions(), None);
    let vectors = embedder
        .embed(texts(&["a", "b", "c"]), EmbedRole::Document)
        .await
        .unwrap();
    assert_close(&vectors[0], &[1.0, 0.0, 0.0, 0.0]);
    assert_close(&vectors[1], &[0.0, -1.0, 0.0, 0.0]);
    assert_close(&vectors[2], &[0.0, 0.0, 0.6, 0.8]);
    vectors.iter().for_each(|v| assert_unit(v));
    let requests = replay.requests();
    assert_eq!(requests[0].path, "/embeddings");
    assert!(
        !requests[0].headers.contains_key("authorization"),
        "no key, no header"
    );
    assert_eq!(
        requests[0].body,
        serde_json::json!({"model": "local", "input": ["a", "b", "c"]}),
        "no dimensions unless asked"
    );
}

#[tokio::test]
async fn nothing_to_embed_sends_nothing() {
    let replay = Replay::start(Vec::new()).await;
    let o = openai(&replay.url, Arc::default());
    assert!(o.embed(Vec::new(), EmbedRole::Document).await.unwrap().is_empty());
    assert_eq!(
        o.embed(texts(&["", " \n"]), EmbedRole::Document).await.unwrap(),
        [[0.0; 4], [0.0; 4]],
        "blank texts get zeros of the configured length"
    );
    let l = ollama(&replay.url, Arc::default());
    assert!(l.embed(Vec::new(), EmbedRole::Document).await.unwrap().is_empty());
    assert_eq!(
        l.embed(texts(&[""]), EmbedRole::Document).await.unwrap(),
        [Vec::<f32>::new()],
        "with no length known, an empty vector (similar to nothing)"
    );
    assert!(replay.requests().is_empty());
}

#[tokio::test]
async fn openai_a_429_is_retried_after_the_advertised_delay() {
    let replay = Replay::start(replies("embed_openai", &["error_429", "one_text"])).await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let o = openai(&replay.url, sleeper.clone());
    let vector = o.embed_one("서울", EmbedRole::Query).await.unwrap();
    assert_close(&vector, &[1.0, 0.0, 0.0, 0.0]);
    assert_eq!(*sleeper.waits.lock().unwrap(), [Duration::from_secs(3)]);
    assert_eq!(replay.requests().len(), 2);
}

#[tokio::test]
async fn openai_a_401_is_not_retried_and_the_key_never_shows() {
    let replay = Replay::start(replies("embed_openai", &["error_401"])).await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let o = openai(&replay.url, sleeper.clone());
    let error = o.embed(texts(&["hi"]), EmbedRole::Document).await.unwrap_err();
    assert!(matches!(
        error,
        ProviderError::Api {
            status: Some(401),
            ..
        }
    ));
    assert_eq!(
        error.to_string(),
        "openai api error (status 401): invalid_request_error: Incorrect API key provided: \
         sk-proj-****************abcd. You can find your API key at https://platform.openai.com/account/api-keys."
    );
    assert!(sleeper.waits.lock().unwrap().is_empty());
    assert_eq!(replay.requests().len(), 1);
    for shown in [format!("{o:?}"), format!("{error:?}"), error.to_string()] {
        assert!(!shown.contains(SECRET), "the key leaked: {shown}");
    }
}

#[tokio::test]
async fn ollama_sends_model_and_input_and_reads_embeddings_in_order() {
    let replay = Replay::start(replies("embed_ollama", &["two_texts"])).await;
    let l = ollama(&replay.url, Arc::default());
    assert_eq!(l.name(), "ollama/bge-m3");
    assert_eq!(l.dimensions(), None);
    let vectors = l
        .embed(texts(&["서울 공고", "housing notice"]), EmbedRole::Document)
        .await
        .unwrap();
    assert_eq!(vectors.len(), 2);
    vectors.iter().for_each(|v| assert_unit(v));
    // The first number is positive and the second's is negative, as sent.
    assert!(vectors[0][0] > 0.0 && vectors[1][0] < 0.0);
    let requests = replay.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/api/embed");
    assert!(!requests[0].headers.contains_key("authorization"));
    insta::assert_snapshot!(
        "ollama_embed_request",
        serde_json::to_string_pretty(&requests[0].body).unwrap()
    );
    let mut with_dims = OllamaEmbedderConfig::new("nomic-embed-text").with_dimensions(4);
    with_dims.base_url = replay.url.clone();
    let with_dims = OllamaEmbedder::new(with_dims).unwrap();
    let suffix = EmbedRoles::for_model("nomic-embed-text").space_suffix().unwrap();
    assert_eq!(with_dims.name(), format!("ollama/nomic-embed-text/4+{suffix}"));
    assert_eq!(
        with_dims.request_body(&texts(&["a"]), EmbedRole::Document),
        serde_json::json!({"model": "nomic-embed-text", "input": ["search_document: a"], "dimensions": 4}),
        "nomic's documents go with their prefix"
    );
    assert_eq!(
        with_dims.request_body(&texts(&["a"]), EmbedRole::Query)["input"],
        serde_json::json!(["search_query: a"])
    );
}

#[tokio::test]
async fn ollama_a_busy_server_is_retried_and_a_missing_model_is_not() {
    let replay = Replay::start(replies(
        "embed_ollama",
        &["error_503_busy", "two_texts", "error_404_model"],
    ))
    .await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let l = ollama(&replay.url, sleeper.clone());
    assert_eq!(
        l.embed(texts(&["a", "b"]), EmbedRole::Document)
            .await
            .unwrap()
            .len(),
        2
    );
    let waits = sleeper.waits.lock().unwrap().clone();
    let first = RetryPolicy::default().initial_backoff;
    assert!(
        waits.len() == 1 && waits[0] >= first / 2 && waits[0] <= first,
        "{waits:?}"
    );
    let error = l.embed(texts(&["a"]), EmbedRole::Document).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "ollama api error (status 404): model \"bge-m3\" not found, try pulling it first"
    );
    assert_eq!(replay.requests().len(), 3);
    assert_eq!(sleeper.waits.lock().unwrap().len(), 1, "a 404 is not retried");
}

#[tokio::test]
async fn an_unreachable_server_is_a_transport_error_after_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let sleeper = Arc::new(RecordingSleeper::default());
    let error = ollama(&url, sleeper.clone())
        .embed(texts(&["a"]), EmbedRole::Document)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("ollama transport error: cannot connect"),
        "{error}"
    );
    assert_eq!(sleeper.waits.lock().unwrap().len(), 3);
}

/// Each malformed answer to the two texts `a`, `b` and the error it gives.
const MALFORMED: &[(&str, &str, &str)] = &[
    ("embed_openai", "bad_wrong_count", "1 embeddings for 2 texts"),
    (
        "embed_openai",
        "bad_missing_data",
        "`data` is missing, not a list",
    ),
    (
        "embed_openai",
        "bad_missing_embedding",
        "`data[1].embedding` is missing",
    ),
    (
        "embed_openai",
        "bad_string_number",
        "`data[1].embedding[1]` is a string, not a number",
    ),
    (
        "embed_openai",
        "bad_base64",
        "`data[0].embedding` is a string, not a list of numbers",
    ),
    (
        "embed_openai",
        "bad_out_of_range",
        "`data[1].embedding[0]` is out of range for a 32-bit float",
    ),
    (
        "embed_openai",
        "bad_nan",
        "not JSON (expected value at line 1 column 134)",
    ),
    (
        "embed_openai",
        "bad_index",
        "`data[1].index` is 5, not an index below 2",
    ),
    ("embed_openai", "bad_repeated_index", "index 0 appears twice"),
    (
        "embed_openai",
        "bad_ragged",
        "a vector of 2 dimensions where 4 were expected",
    ),
    (
        "embed_openai",
        "bad_empty_vector",
        "`data[1].embedding` is an empty list",
    ),
    (
        "embed_openai",
        "bad_not_json",
        "not JSON (expected value at line 1 column 1): <html>",
    ),
    ("embed_ollama", "bad_wrong_count", "3 embeddings for 2 texts"),
    (
        "embed_ollama",
        "bad_missing_embeddings",
        "`embeddings` is missing, not a list",
    ),
    (
        "embed_ollama",
        "bad_null_number",
        "`embeddings[1][1]` is null, not a number",
    ),
    (
        "embed_ollama",
        "bad_nan",
        "not JSON (expected value at line 1 column 52)",
    ),
    (
        "embed_ollama",
        "bad_ragged",
        "a vector of 2 dimensions where 4 were expected",
    ),
    (
        "embed_ollama",
        "bad_flat",
        "`embeddings[0]` is a number, not a list of numbers",
    ),
];

#[tokio::test]
async fn malformed_answers_are_clear_errors() {
    for (dir, name, expected) in MALFORMED {
        let replay = Replay::start(replies(dir, &[name])).await;
        let sleeper = Arc::new(RecordingSleeper::default());
        let embedder: Box<dyn Embedder> = if *dir == "embed_openai" {
            Box::new(openai(&replay.url, sleeper.clone()))
        } else {
            Box::new(ollama(&replay.url, sleeper.clone()))
        };
        let error = embedder
            .embed(texts(&["a", "b"]), EmbedRole::Document)
            .await
            .unwrap_err();
        let provider = if *dir == "embed_openai" {
            "openai"
        } else {
            "ollama"
        };
        let message = error.to_string();
        assert!(
            matches!(error, ProviderError::Stream { .. }),
            "{dir}/{name}: {error:?}"
        );
        let prefix = format!("{provider} stream error: malformed embeddings response: ");
        assert!(
            message.starts_with(&prefix) && message[prefix.len()..].starts_with(expected),
            "{dir}/{name}: {message}"
        );
        assert!(
            sleeper.waits.lock().unwrap().is_empty(),
            "{dir}/{name}: not retried"
        );
    }
}

#[tokio::test]
async fn an_error_object_in_a_success_answer_is_an_api_error() {
    let replay = Replay::start(replies("embed_openai", &["bad_error_body"])).await;
    let error = openai(&replay.url, Arc::default())
        .embed(texts(&["a"]), EmbedRole::Document)
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "openai api error: invalid_request_error: the model does not support embeddings"
    );
}

#[test]
fn bad_settings_are_refused() {
    let mut config = OpenAiEmbedderConfig::new(None).with_model(" ");
    assert_eq!(
        OpenAiEmbedder::new(config.clone()).unwrap_err().to_string(),
        "provider configuration error: openai embedder: the model name is empty"
    );
    config = config.with_model("m").with_dimensions(0);
    assert!(OpenAiEmbedder::new(config).is_err());
    assert!(OllamaEmbedder::new(OllamaEmbedderConfig::new("")).is_err());
}
