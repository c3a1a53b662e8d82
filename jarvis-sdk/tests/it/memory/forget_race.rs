//! Distillation and `/forget` racing on `user_model.json` and the user
//! profile: a forgotten fact never comes back, and the forgotten digest is
//! never lost.
//!
//! Each round distils a fact holding a new secret and forgets that secret
//! at the same moment, from two OS threads released together (one given a
//! head start that changes from round to round); whichever wins, afterwards neither the user model's entries
//! nor the profile records hold the secret, and every secret forgotten so
//! far is still on the forgotten list.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jarvis_sdk::common::Timestamp;
use jarvis_sdk::memory::{
    Agents, DistilledFact, Layer, MemoryConfig, MemoryFilter, MemoryRecord, MemoryScope, MemoryService,
    SqliteMemoryStore, UserModel, fact_digest, normalise_fact,
};
use jarvis_sdk::model::HashEmbedder;

const ROUNDS: usize = 1_000;

fn episode() -> MemoryRecord {
    MemoryRecord {
        id: "e1".into(),
        user: "u".into(),
        agent_id: "main".into(),
        layer: Layer::Episodic,
        kind: "episode".into(),
        source: "turn".into(),
        text: "현관 비밀번호를 알려 줬어".into(),
        metadata: serde_json::Value::Null,
        created_at: Timestamp::from_millis(1_795_910_400_000),
        rehearsal: 0,
        embedding: Vec::new(),
        embedder: String::new(),
    }
}

/// Busy-waits `micros` microseconds: a head start that moves where the
/// two sides meet from round to round (part of the experiment, not a
/// synchronisation).
fn spin(micros: u64) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_micros(micros) {
        std::hint::spin_loop();
    }
}

#[test]
fn distillation_racing_forget_never_brings_a_forgotten_fact_back() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle();
    let home = tempfile::tempdir().unwrap();
    let store = handle
        .block_on(SqliteMemoryStore::open_in_home(home.path()))
        .unwrap();
    let memory = MemoryService::new(Arc::new(store), Arc::new(HashEmbedder::default()))
        .with_config(MemoryConfig::for_home(home.path()));
    let scope = MemoryScope::new("u", "main", "s");
    let read = vec![episode()];
    let profile = MemoryFilter::for_user("u").layer(Layer::Semantic, Agents::Any);
    let mut outcomes = [0usize; 2];
    for round in 0..ROUNDS {
        let secret = format!("금고 {round:04}-{}", round * 7919 % 10_007);
        let fact = DistilledFact {
            key: format!("safe {round}"),
            value: format!("금고 번호는 {secret} 이다"),
            episodes: vec!["e1".into()],
        };
        // Two OS threads released together; one of them gets a head start
        // of 0 to ~2 ms, alternating sides.
        let head_start = (round as u64 * 37) % 2_000;
        let barrier = std::sync::Barrier::new(2);
        let (distilled, forgot) = std::thread::scope(|s| {
            let distil = s.spawn(|| {
                barrier.wait();
                if round % 2 == 0 {
                    spin(head_start);
                }
                handle.block_on(memory.add_distilled_facts(&scope, &read, vec![fact]))
            });
            let forget = s.spawn(|| {
                barrier.wait();
                if round % 2 == 1 {
                    spin(head_start);
                }
                handle.block_on(memory.forget(&scope, &secret))
            });
            (distil.join().unwrap(), forget.join().unwrap())
        });
        let distilled = distilled.unwrap();
        forgot.unwrap();
        outcomes[distilled.added] += 1;

        let text = std::fs::read_to_string(home.path().join("user_model.json")).unwrap();
        let model: UserModel = serde_json::from_str(&text).unwrap();
        assert!(
            model.entries.values().all(|v| !v.contains(&secret)),
            "round {round}: the forgotten fact is back in user_model.json: {:?}",
            model.entries
        );
        let digest = fact_digest(&normalise_fact(&secret));
        assert!(
            model.forgotten.iter().any(|f| f.digest == digest),
            "round {round}: this round's forgotten digest was lost"
        );
        assert_eq!(
            model.forgotten.len(),
            round + 1,
            "round {round}: a forgotten digest was lost"
        );
        let records = handle.block_on(memory.store().list(&profile)).unwrap();
        assert!(
            records.iter().all(|r| !r.text.contains(&secret)),
            "round {round}: the forgotten fact is back in the user profile"
        );
    }
    println!(
        "{ROUNDS} rounds: the fact was distilled first (then forgotten) {} times, refused {} times",
        outcomes[1], outcomes[0]
    );
}
