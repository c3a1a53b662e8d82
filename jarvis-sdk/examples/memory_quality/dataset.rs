//! The conversations the benchmark runs on (`data/*.yaml`): their
//! sessions, turns and labelled questions, loaded in file order.

use jarvis_sdk::common::Timestamp;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Minutes between two turns of a session.
pub(crate) const TURN_MINUTES: i64 = 2;

#[derive(Debug, Deserialize)]
pub(crate) struct Conversation {
    pub(crate) id: String,
    pub(crate) lang: String,
    pub(crate) sessions: Vec<Session>,
    pub(crate) questions: Vec<Question>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) at: String,
    pub(crate) turns: Vec<Turn>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Turn {
    pub(crate) u: String,
    pub(crate) a: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Question {
    pub(crate) q: String,
    pub(crate) asked_at: String,
    pub(crate) kind: String,
    pub(crate) evidence: Vec<String>,
    #[serde(default)]
    pub(crate) superseded: Vec<String>,
}

/// A turn as the retrievers see it.
#[derive(Debug, Clone)]
pub(crate) struct Labelled {
    pub(crate) label: String,
    pub(crate) session: String,
    pub(crate) at: Timestamp,
    pub(crate) user: String,
    pub(crate) answer: String,
}

impl Conversation {
    pub(crate) fn turns(&self) -> Vec<Labelled> {
        let mut out = Vec::new();
        for s in &self.sessions {
            let start = time(&s.at);
            for (i, t) in s.turns.iter().enumerate() {
                out.push(Labelled {
                    label: format!("{}.{}", s.id, i + 1),
                    session: s.id.clone(),
                    at: Timestamp::from_millis(start.as_millis() + i as i64 * TURN_MINUTES * 60_000),
                    user: t.u.clone(),
                    answer: t.a.clone(),
                });
            }
        }
        out
    }

    /// Conversations 01–10 of each language are the dev half.
    pub(crate) fn dev(&self) -> bool {
        self.id[2..].parse::<u32>().is_ok_and(|n| n <= 10)
    }
}

pub(crate) fn time(text: &str) -> Timestamp {
    Timestamp::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

pub(crate) fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/memory_quality/data")
}

pub(crate) fn load(only: &[String]) -> Vec<Conversation> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .expect("the data directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("a readable file");
        let c: Conversation =
            serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if only.is_empty() || only.contains(&c.id) {
            out.push(c);
        }
    }
    out
}
