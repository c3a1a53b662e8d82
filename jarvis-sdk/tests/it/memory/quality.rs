//! Recall quality on the labelled set `recall_set.yaml` (committed before
//! any recall setting was tuned): queries that share wording with their
//! memory in another form must find it in the top 3 for at least 90% of
//! each language's queries with the default embedder. The hit rate on true
//! paraphrases is reported without a target.
//!
//! `cargo test -p jarvis-sdk --all-features --test it memory::quality -- --nocapture`
//! prints the figures.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jarvis_sdk::common::SequentialIds;
use jarvis_sdk::memory::{InMemoryMemoryStore, Layer, MemoryScope, MemoryService};
use jarvis_sdk::model::HashEmbedder;
use serde::Deserialize;

use super::fixed_clock;

#[derive(Debug, Deserialize)]
struct Set {
    memories: Vec<Memory>,
    queries: Vec<Query>,
    paraphrases: Vec<Query>,
}

#[derive(Debug, Deserialize)]
struct Memory {
    id: String,
    lang: String,
    text: String,
}

#[derive(Debug, Deserialize)]
struct Query {
    lang: String,
    expect: String,
    text: String,
    #[serde(default)]
    #[allow(dead_code)]
    form: Option<String>,
}

/// Per language: (hits, queries, the missed queries).
type Rates = BTreeMap<String, (usize, usize, Vec<String>)>;

async fn hit_rates(queries: &[Query]) -> Rates {
    let set: Set = serde_yaml::from_str(include_str!("recall_set.yaml")).unwrap();
    let service = MemoryService::new(
        Arc::new(InMemoryMemoryStore::new()),
        Arc::new(HashEmbedder::default()),
    )
    .with_clock(fixed_clock())
    .with_ids(Arc::new(SequentialIds::default()));
    let scope = MemoryScope::new("u", "main", "s");
    let mut label: HashMap<String, String> = HashMap::new();
    for memory in &set.memories {
        let record = service
            .write(&scope, "note", &memory.text, serde_json::Value::Null)
            .await
            .unwrap();
        assert_eq!(record.layer, Layer::Episodic);
        label.insert(record.id, memory.id.clone());
        assert!(memory.lang == "ko" || memory.lang == "en");
    }
    let mut rates = Rates::new();
    for query in queries {
        let top = service
            .search(&scope, &query.text, Layer::Episodic, 3)
            .await
            .unwrap();
        let found: Vec<&str> = top.iter().map(|r| label[&r.record.id].as_str()).collect();
        let entry = rates.entry(query.lang.clone()).or_default();
        entry.1 += 1;
        if found.contains(&query.expect.as_str()) {
            entry.0 += 1;
        } else {
            entry.2.push(format!(
                "{:?} → {:?} (expected {})",
                query.text, found, query.expect
            ));
        }
    }
    rates
}

fn report(what: &str, rates: &Rates) {
    for (lang, (hits, total, misses)) in rates {
        println!(
            "recall quality, {what}, {lang}: {hits}/{total} in the top 3 ({:.1}%)",
            100.0 * *hits as f64 / *total as f64
        );
        for miss in misses {
            println!("    missed {miss}");
        }
    }
}

#[tokio::test]
async fn queries_in_another_form_find_their_memory_in_the_top_three() {
    let set: Set = serde_yaml::from_str(include_str!("recall_set.yaml")).unwrap();
    assert!(set.memories.len() >= 40 && set.queries.len() >= 40);
    let rates = hit_rates(&set.queries).await;
    report("wording in another form", &rates);
    assert_eq!(rates.keys().collect::<Vec<_>>(), ["en", "ko"]);
    for (lang, (hits, total, misses)) in &rates {
        assert!(
            *hits as f64 >= 0.9 * *total as f64,
            "{lang}: only {hits} of {total} queries found their memory in the top 3; missed: {misses:#?}"
        );
    }
}

#[tokio::test]
async fn true_paraphrases_are_reported_without_a_target() {
    let set: Set = serde_yaml::from_str(include_str!("recall_set.yaml")).unwrap();
    let rates = hit_rates(&set.paraphrases).await;
    report("true paraphrases (no target)", &rates);
    assert_eq!(rates.values().map(|r| r.1).sum::<usize>(), set.paraphrases.len());
}
