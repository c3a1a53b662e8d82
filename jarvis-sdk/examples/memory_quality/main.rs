//! Measures how well memory finds what matters, on the project's own
//! evaluation set (`data/`, CC0): 40 multi-session conversations of a
//! person with their assistant (20 in English, 20 in Korean, 4 to 9 months
//! each) and the questions asked of them months later, each with its
//! labelled evidence turns. Kinds of question: a detail of one turn
//! (`fact`), a fact said once in the first months (`old`), when something
//! happened or what happened in a period (`temporal`), a fact that changed
//! later (`correction`, whose superseded turns are labelled too) and
//! answers that need two turns or more (`multi`). See `data/README.md`.
//!
//! Every turn is written through `MemoryService::record_turn` as an
//! episode, at its own time (an injected clock), one session of the
//! memory per session of the conversation, one user per conversation; then
//! each question is searched in the episodic layer at its own time. A
//! retriever's answer is a ranked list of turns; for the memory service,
//! each recalled episode is followed by the neighbouring turns it brings
//! (what `[장기 기억]` shows), and the list is cut to 10.
//!
//! Figures, per retriever: `r@5` and `r@10` (questions with an evidence
//! turn in the top 5 or 10), `all@10` (questions with every evidence turn
//! in the top 10), and recall@10 by kind, by language, and on the two
//! halves of the set (`dev`: conversations 01–10 of each language, on
//! which recall settings may be chosen; `held-out`: 11–20, never used to
//! choose them). `stale` is the share of correction questions whose
//! superseded turn ranks above the current one.
//!
//! Retrievers:
//! - `bm25`: plain Okapi BM25 (k1 1.2, b 0.75) over lower-cased word tokens
//!   (letters and digits, split at everything else), per conversation: the
//!   baseline.
//! - `vectors`: the offline hash embedder alone, by cosine.
//! - `default`: the memory service as a home runs it by default (the
//!   embedded SQLite store, the hash embedder, hybrid recall).
//! - with `JARVIS_EMBED__PROVIDER` naming a server: `<embedder>` alone
//!   (documents and questions sent in the roles its family expects, by
//!   cosine) and `default+<embedder>` (the memory service with it).
//!
//! Targets (`--check` exits 1 when one is missed, in a `--smoke` run too:
//! they compare retrievers on the same data, so they hold on its four
//! conversations as well): `default` r@10 at least 0.05 above `bm25`; with
//! a real embedder, `default+<embedder>` r@10 at least 0.10 above `bm25`
//! and above the embedder alone.
//!
//! Run with `cargo run --release -p jarvis-sdk --example memory_quality`
//! (`-- --smoke` for four conversations, `-- --check` to fail on a missed
//! target, `-- --only en03,ko11` for some conversations, `-- --misses
//! default` to print the questions a retriever misses).

use jarvis_sdk::common::{ManualClock, SequentialIds};
use jarvis_sdk::memory::{
    Layer, MemoryConfig, MemoryScope, MemoryService, MemoryStore, SqliteMemoryStore, TurnRecord,
};
use jarvis_sdk::model::{EmbedConfig, EmbedRole, Embedder, HashEmbedder, cosine};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

mod dataset;

use dataset::{Conversation, Labelled, Question, load, time};

/// Turns a retriever answers per question.
const K: usize = 10;

/// One retriever's answer to one question: the turn labels, best first.
type Ranking = Vec<String>;

/// A retriever: answers every question of a conversation.
trait Retriever {
    fn name(&self) -> String;
    async fn answer(&mut self, c: &Conversation) -> Vec<Ranking>;
    fn time_taken(&self, _turns: usize) -> Option<String> {
        None
    }
}

/// Plain Okapi BM25 over word tokens.
struct Bm25;

fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

impl Retriever for Bm25 {
    fn name(&self) -> String {
        "bm25".into()
    }

    async fn answer(&mut self, c: &Conversation) -> Vec<Ranking> {
        let turns = c.turns();
        let docs: Vec<Vec<String>> = turns
            .iter()
            .map(|t| words(&format!("{} {}", t.user, t.answer)))
            .collect();
        let n = docs.len() as f64;
        let average = docs.iter().map(Vec::len).sum::<usize>() as f64 / n.max(1.0);
        let mut df: HashMap<&str, f64> = HashMap::new();
        for d in &docs {
            let mut seen: Vec<&str> = d.iter().map(String::as_str).collect();
            seen.sort_unstable();
            seen.dedup();
            for w in seen {
                *df.entry(w).or_default() += 1.0;
            }
        }
        let (k1, b) = (1.2, 0.75);
        c.questions
            .iter()
            .map(|q| {
                let mut terms = words(&q.q);
                terms.sort();
                terms.dedup();
                let mut scored: Vec<(f64, usize)> = docs
                    .iter()
                    .enumerate()
                    .map(|(i, d)| {
                        let score: f64 = terms
                            .iter()
                            .filter_map(|t| {
                                let f = d.iter().filter(|w| *w == t).count() as f64;
                                (f > 0.0).then(|| {
                                    let df = df[t.as_str()];
                                    let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                                    idf * f * (k1 + 1.0) / (f + k1 * (1.0 - b + b * d.len() as f64 / average))
                                })
                            })
                            .sum();
                        (score, i)
                    })
                    .filter(|(s, _)| *s > 0.0)
                    .collect();
                scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                scored
                    .into_iter()
                    .take(K)
                    .map(|(_, i)| turns[i].label.clone())
                    .collect()
            })
            .collect()
    }
}

/// An embedder alone, by cosine.
struct Vectors {
    name: String,
    embedder: Arc<dyn Embedder>,
}

impl Retriever for Vectors {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn answer(&mut self, c: &Conversation) -> Vec<Ranking> {
        let turns = c.turns();
        // The episode text the memory service writes for a turn.
        let texts: Vec<String> = turns.iter().map(|t| episode_text(&t.user, &t.answer)).collect();
        let docs = self
            .embedder
            .embed(texts, EmbedRole::Document)
            .await
            .expect("the embedder answers");
        let questions: Vec<String> = c.questions.iter().map(|q| q.q.clone()).collect();
        let queries = self
            .embedder
            .embed(questions, EmbedRole::Query)
            .await
            .expect("the embedder answers");
        queries
            .iter()
            .map(|q| {
                let mut scored: Vec<(f32, usize)> =
                    docs.iter().enumerate().map(|(i, d)| (cosine(q, d), i)).collect();
                scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                scored
                    .into_iter()
                    .take(K)
                    .map(|(_, i)| turns[i].label.clone())
                    .collect()
            })
            .collect()
    }
}

/// The text `record_turn` writes for a turn (the answer cut to 500
/// characters, as by default).
fn episode_text(user: &str, answer: &str) -> String {
    let answer: String = answer.trim().chars().take(500).collect();
    format!("{}\n→ {answer}", user.trim())
}

/// An embedder's answers kept by text and role, so the retrievers that
/// share an embedder ask it once per text (a real embedding server takes
/// tens of milliseconds a text), and a later run of the benchmark asks it
/// nothing: the cache is kept under `target/` by the embedder's name.
#[derive(Debug)]
struct Cached {
    inner: Arc<dyn Embedder>,
    file: Option<PathBuf>,
    vectors: std::sync::Mutex<HashMap<(bool, String), Vec<f32>>>,
}

impl Cached {
    fn new(inner: Arc<dyn Embedder>, keep: bool) -> Self {
        let file = keep.then(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/memory_quality-cache")
                .join(format!("{}.json", inner.name().replace(['/', '+', ':'], "_")))
        });
        let vectors = file
            .as_ref()
            .and_then(|f| std::fs::read(f).ok())
            .and_then(|bytes| serde_json::from_slice::<Vec<(bool, String, Vec<f32>)>>(&bytes).ok())
            .map(|list| list.into_iter().map(|(q, t, v)| ((q, t), v)).collect())
            .unwrap_or_default();
        Self {
            inner,
            file,
            vectors: std::sync::Mutex::new(vectors),
        }
    }

    /// Embeds every text of `texts` not cached yet, in batches.
    async fn prefill(&self, texts: Vec<String>, role: EmbedRole) {
        let query = role == EmbedRole::Query;
        let missing: Vec<String> = {
            let vectors = self.vectors.lock().unwrap();
            let mut m: Vec<String> = texts
                .into_iter()
                .filter(|t| !vectors.contains_key(&(query, t.clone())))
                .collect();
            m.sort();
            m.dedup();
            m
        };
        for batch in missing.chunks(64) {
            let got = self
                .inner
                .embed(batch.to_vec(), role)
                .await
                .expect("the embedder answers");
            let mut vectors = self.vectors.lock().unwrap();
            for (t, v) in batch.iter().zip(got) {
                vectors.insert((query, t.clone()), v);
            }
        }
    }

    fn save(&self) {
        let Some(file) = &self.file else { return };
        let vectors = self.vectors.lock().unwrap();
        let list: Vec<(&bool, &String, &Vec<f32>)> = vectors.iter().map(|((q, t), v)| (q, t, v)).collect();
        let _ = std::fs::create_dir_all(file.parent().unwrap());
        let _ = std::fs::write(file, serde_json::to_vec(&list).unwrap());
    }
}

impl Embedder for Cached {
    fn embed(
        &self,
        texts: Vec<String>,
        role: EmbedRole,
    ) -> futures::future::BoxFuture<'static, Result<Vec<Vec<f32>>, jarvis_sdk::model::ProviderError>> {
        let query = role == EmbedRole::Query;
        let found: Option<Vec<Vec<f32>>> = {
            let vectors = self.vectors.lock().unwrap();
            texts
                .iter()
                .map(|t| vectors.get(&(query, t.clone())).cloned())
                .collect()
        };
        match found {
            Some(v) => Box::pin(futures::future::ready(Ok(v))),
            None => self.inner.embed(texts, role),
        }
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn dimensions(&self) -> Option<usize> {
        self.inner.dimensions()
    }
}

/// The memory service: every turn written as an episode, every question
/// searched in the episodic layer.
struct Service {
    name: String,
    embedder: Arc<dyn Embedder>,
    config: MemoryConfig,
    dir: tempfile::TempDir,
    /// Time spent writing turns and answering questions.
    write_time: Duration,
    search_time: Duration,
    searches: usize,
}

impl Retriever for Service {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn time_taken(&self, turns: usize) -> Option<String> {
        Some(format!(
            "{}: writing {:.2} ms a turn, searching {:.2} ms a question",
            self.name,
            self.write_time.as_secs_f64() * 1e3 / turns.max(1) as f64,
            self.search_time.as_secs_f64() * 1e3 / self.searches.max(1) as f64
        ))
    }

    async fn answer(&mut self, c: &Conversation) -> Vec<Ranking> {
        let store = SqliteMemoryStore::open(self.dir.path().join(format!("{}.sqlite3", c.id)))
            .await
            .expect("a store");
        let store: Arc<dyn MemoryStore> = Arc::new(store);
        let clock = Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH));
        let service = MemoryService::new(store, self.embedder.clone())
            .with_clock(clock.clone())
            .with_ids(Arc::new(SequentialIds::default()))
            .with_config(self.config.clone());
        let mut label_of: HashMap<String, String> = HashMap::new();
        let started = Instant::now();
        for t in c.turns() {
            clock.set(t.at.to_system_time());
            let scope = MemoryScope::new(c.id.as_str(), "main", format!("{}-{}", c.id, t.session));
            let episode = service
                .record_turn(&scope, TurnRecord::new(&t.user, &t.answer))
                .await
                .expect("a written turn")
                .expect("an episode");
            label_of.insert(episode.id, t.label);
        }
        self.write_time += started.elapsed();
        let scope = MemoryScope::new(c.id.as_str(), "main", format!("{}-questions", c.id));
        let mut out = Vec::new();
        for q in &c.questions {
            clock.set(time(&q.asked_at).to_system_time());
            let started = Instant::now();
            let recalled = service
                .search(&scope, &q.q, Layer::Episodic, K)
                .await
                .expect("a search");
            self.search_time += started.elapsed();
            self.searches += 1;
            let mut ranking: Ranking = Vec::new();
            for r in recalled {
                for record in std::iter::once(&r.record).chain(&r.context) {
                    if let Some(label) = label_of.get(&record.id)
                        && !ranking.contains(label)
                    {
                        ranking.push(label.clone());
                    }
                }
            }
            ranking.truncate(K);
            out.push(ranking);
        }
        out
    }
}

/// Hits of one retriever, per question.
#[derive(Debug, Default, Clone)]
struct Tally {
    questions: usize,
    at5: usize,
    at10: usize,
    all10: usize,
    corrections: usize,
    stale: usize,
}

impl Tally {
    fn add(&mut self, q: &Question, ranking: &Ranking) {
        let pos = |label: &String| ranking.iter().position(|r| r == label);
        let first = q.evidence.iter().filter_map(pos).min();
        self.questions += 1;
        self.at5 += usize::from(first.is_some_and(|p| p < 5));
        self.at10 += usize::from(first.is_some_and(|p| p < 10));
        self.all10 += usize::from(q.evidence.iter().all(|e| pos(e).is_some_and(|p| p < 10)));
        if !q.superseded.is_empty() {
            self.corrections += 1;
            let old = q.superseded.iter().filter_map(pos).min();
            if old.is_some_and(|o| first.is_none_or(|f| o < f)) {
                self.stale += 1;
            }
        }
    }

    fn rate(n: usize, of: usize) -> f64 {
        n as f64 / of.max(1) as f64
    }

    fn r10(&self) -> f64 {
        Self::rate(self.at10, self.questions)
    }
}

/// Every tally of one retriever: overall and by group.
#[derive(Debug, Default)]
struct Report {
    all: Tally,
    groups: BTreeMap<String, Tally>,
    misses: Vec<String>,
    stale: Vec<String>,
}

impl Report {
    fn add(&mut self, c: &Conversation, q: &Question, ranking: &Ranking) {
        self.all.add(q, ranking);
        let half = if c.dev() { "dev" } else { "held-out" };
        for group in [q.kind.clone(), c.lang.clone(), half.to_owned()] {
            self.groups.entry(group).or_default().add(q, ranking);
        }
        let pos = |l: &String| ranking.iter().position(|r| r == l);
        let current = q.evidence.iter().filter_map(pos).min();
        if let Some(old) = q.superseded.iter().filter_map(pos).min()
            && current.is_none_or(|c| old < c)
        {
            self.stale.push(format!(
                "{} {:?}: superseded {:?} at {old}, current {:?} at {current:?}",
                c.id, q.q, q.superseded, q.evidence
            ));
        }
        if !q.evidence.iter().any(|e| ranking.contains(e)) {
            self.misses.push(format!(
                "{} [{}] {:?} wants {:?}, got {:?}",
                c.id,
                q.kind,
                q.q,
                q.evidence,
                &ranking[..ranking.len().min(5)]
            ));
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let smoke = flag("--smoke");
    let check = flag("--check");
    let mut only: Vec<String> = value("--only")
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    if smoke && only.is_empty() {
        only = ["en01", "en11", "ko01", "ko11"].map(String::from).to_vec();
    }
    let conversations = load(&only);
    let turns: usize = conversations.iter().map(|c| c.turns().len()).sum();
    let questions: usize = conversations.iter().map(|c| c.questions.len()).sum();
    println!(
        "memory_quality: {} conversations, {turns} turns, {questions} questions{}",
        conversations.len(),
        if smoke { " (smoke)" } else { "" }
    );

    let hash: Arc<dyn Embedder> = Arc::new(HashEmbedder::default());
    let service = |name: &str, embedder: Arc<dyn Embedder>, config: MemoryConfig| Service {
        name: name.to_owned(),
        embedder,
        config,
        dir: tempfile::tempdir().expect("a temporary directory"),
        write_time: Duration::ZERO,
        search_time: Duration::ZERO,
        searches: 0,
    };
    let real: Option<Arc<Cached>> = match EmbedConfig::from_env() {
        Ok(config) if config.provider != jarvis_sdk::model::EmbedProvider::Hash => {
            let embedder = config.build().expect("the embedder named by JARVIS_EMBED__*");
            Some(Arc::new(Cached::new(embedder, !flag("--no-cache"))))
        }
        Ok(_) => None,
        Err(e) => panic!("JARVIS_EMBED__*: {e}"),
    };
    if let Some(cached) = &real {
        let started = Instant::now();
        let all_turns: Vec<Labelled> = conversations.iter().flat_map(Conversation::turns).collect();
        cached
            .prefill(
                all_turns
                    .iter()
                    .map(|t| episode_text(&t.user, &t.answer))
                    .collect(),
                EmbedRole::Document,
            )
            .await;
        let mut queries: Vec<String> = all_turns.iter().map(|t| t.user.trim().to_owned()).collect();
        queries.extend(
            conversations
                .iter()
                .flat_map(|c| c.questions.iter().map(|q| q.q.clone())),
        );
        cached.prefill(queries, EmbedRole::Query).await;
        cached.save();
        println!(
            "{}: embeddings ready in {:.1} s",
            cached.name(),
            started.elapsed().as_secs_f64()
        );
    }

    // The retrievers, in the order of the table.
    let mut retrievers: Vec<Box<dyn RetrieverDyn>> = vec![
        Box::new(Bm25),
        Box::new(Vectors {
            name: "vectors".into(),
            embedder: hash.clone(),
        }),
        Box::new(service("default", hash.clone(), MemoryConfig::default())),
    ];
    if let Some(cached) = &real {
        let name = short(cached.name());
        let embedder: Arc<dyn Embedder> = cached.clone();
        retrievers.push(Box::new(Vectors {
            name: name.clone(),
            embedder: embedder.clone(),
        }));
        retrievers.push(Box::new(service(
            &format!("default+{name}"),
            embedder,
            MemoryConfig::default(),
        )));
    }
    if flag("--ablations") {
        let mut embedders: Vec<(String, Arc<dyn Embedder>)> = vec![("hash".into(), hash.clone())];
        if let Some(cached) = &real {
            embedders.push((short(cached.name()), cached.clone()));
        }
        for (name, embedder) in embedders {
            for (what, config) in ablations() {
                retrievers.push(Box::new(service(
                    &format!("{name} {what}"),
                    embedder.clone(),
                    config,
                )));
            }
        }
    }

    let mut reports: Vec<(String, Report)> = Vec::new();
    let mut timings: Vec<String> = Vec::new();
    for r in &mut retrievers {
        let mut report = Report::default();
        for c in &conversations {
            let rankings = r.answer_dyn(c).await;
            for (q, ranking) in c.questions.iter().zip(&rankings) {
                report.add(c, q, ranking);
            }
        }
        timings.extend(r.timing(turns));
        reports.push((r.name_dyn(), report));
    }

    print_table(&reports);
    for t in timings {
        println!("{t}");
    }
    if let Some(name) = value("--misses") {
        for (n, report) in &reports {
            if *n == name {
                for m in &report.misses {
                    println!("miss: {m}");
                }
                for m in &report.stale {
                    println!("stale: {m}");
                }
            }
        }
    }

    let r10 = |name: &str| {
        reports
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0.0, |(_, r)| r.all.r10())
    };
    let mut missed = Vec::new();
    let base = r10("bm25");
    let targets: Vec<(String, f64, String)> = {
        let mut t = vec![("default".to_owned(), base + 0.05, "bm25 + 0.05".to_owned())];
        if let Some(cached) = &real {
            let alone = short(cached.name());
            let with = format!("default+{alone}");
            t.push((with.clone(), base + 0.10, "bm25 + 0.10".to_owned()));
            t.push((with, r10(&alone) + 1e-9, format!("above {alone}")));
        }
        t
    };
    println!();
    for (name, need, what) in &targets {
        let got = r10(name);
        let met = got >= *need;
        println!(
            "target: {name} r@10 {got:.3} ≥ {need:.3} ({what}): {}",
            if met { "met" } else { "MISSED" }
        );
        if !met {
            missed.push(name.clone());
        }
    }
    if check && !missed.is_empty() {
        std::process::exit(1);
    }
}

/// Variants of the default configuration (`--ablations`): what each part
/// of recall adds.
fn ablations() -> Vec<(&'static str, MemoryConfig)> {
    let with = |f: &dyn Fn(&mut MemoryConfig)| {
        let mut c = MemoryConfig::default();
        f(&mut c);
        c
    };
    vec![
        ("no-context", with(&|c| c.context = false)),
        ("context-all", with(&|c| c.context_share = 0.0)),
        (
            "no-recency",
            with(&|c| {
                c.weights.relevance = 1.0;
                c.weights.recency = 0.0;
                c.weights.rehearsal = 0.0;
            }),
        ),
        ("fusion-k-60", with(&|c| c.fusion_k = 60.0)),
        ("latest-off", with(&|c| c.latest_band = 1.0)),
    ]
}

/// A short name for an embedder's space.
fn short(name: &str) -> String {
    name.split('+')
        .next()
        .unwrap_or(name)
        .rsplit('/')
        .next()
        .unwrap_or(name)
        .to_owned()
}

fn print_table(reports: &[(String, Report)]) {
    let groups = [
        "fact",
        "old",
        "temporal",
        "correction",
        "multi",
        "en",
        "ko",
        "dev",
        "held-out",
    ];
    print!(
        "\n{:<28} {:>6} {:>6} {:>7} {:>6}",
        "retriever", "r@5", "r@10", "all@10", "stale"
    );
    for g in groups {
        print!(" {:>9}", g);
    }
    println!();
    for (name, r) in reports {
        let t = &r.all;
        print!(
            "{:<28} {:>6.3} {:>6.3} {:>7.3} {:>6.3}",
            name,
            Tally::rate(t.at5, t.questions),
            t.r10(),
            Tally::rate(t.all10, t.questions),
            Tally::rate(t.stale, t.corrections)
        );
        for g in groups {
            let v = r.groups.get(g).map_or(0.0, Tally::r10);
            print!(" {:>9.3}", v);
        }
        println!();
    }
    println!("(columns after `stale`: r@10 by kind, language and half)");
}

/// [`Retriever`] as a trait object.
trait RetrieverDyn {
    fn name_dyn(&self) -> String;
    /// A line on the time it took, for those worth timing.
    fn timing(&self, turns: usize) -> Option<String>;
    fn answer_dyn<'a>(
        &'a mut self,
        c: &'a Conversation,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<Ranking>> + 'a>>;
}

impl<R: Retriever> RetrieverDyn for R {
    fn name_dyn(&self) -> String {
        self.name()
    }
    fn timing(&self, turns: usize) -> Option<String> {
        self.time_taken(turns)
    }
    fn answer_dyn<'a>(
        &'a mut self,
        c: &'a Conversation,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<Ranking>> + 'a>> {
        Box::pin(self.answer(c))
    }
}
