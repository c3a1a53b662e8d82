//! The lexical side of recall: each partition's records as an inverted
//! index of terms, ranked by Okapi BM25.
//!
//! **Terms** ([`terms`]): the words of `common/words.rs` (NFKC, lower case,
//! Korean particles and endings and English suffixes stripped, function
//! words left out). A Latin or digit word is one term (its stem); a word
//! of Hangul or of a script written without spaces (Han, kana, Thai) gives
//! the character bigrams of its stem, or the stem itself when it is one
//! character. Bigrams need no dictionary and match Korean compounds by
//! their parts (`행복주택` and `주택`), as word n-grams do in search
//! engines for these languages.
//!
//! **Index** ([`Postings`]): per partition, a posting list per term
//! (row, term frequency) and a forward list per row (its terms), so a
//! record's terms leave every list when it is removed, the row that takes
//! its place is renumbered, and a candidate found another way is scored
//! without reading a posting list.
//!
//! **Ranking**: BM25 with `k1 = 1.2`, `b = 0.75` (Robertson and Zaragoza,
//! "The Probabilistic Relevance Framework: BM25 and Beyond", 2009; the
//! defaults of Lucene and most engines), `idf = ln(1 + (N - df + 0.5) /
//! (df + 0.5))`, statistics of the partition. In large partitions, terms
//! found in more than a tenth of the rows only add to candidates the rarer
//! terms found (as MaxScore does), so a common word does not make a search
//! read most of the partition.

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::RandomState;

use jarvis_common::words::{Script, TokenScratch, for_each_token};

/// BM25's term-frequency saturation.
const K1: f32 = 1.2;
/// BM25's length normalisation.
const B: f32 = 0.75;

/// Partitions above this many rows leave common terms out of the search
/// of new candidates (see the module docs).
const PRUNE_ROWS: usize = 5_000;

thread_local! {
    /// The scores by row of [`Postings::search`], all 0.0 between searches.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A term is common when it is in more than this share of the rows.
const COMMON_SHARE: usize = 10;

/// In partitions of at least this many rows, a term in more than half of
/// them says nothing about which one is meant (its idf is below ln 2 and
/// falls to 0 as it nears every row) and is left out of the search, so a
/// word every record shares does not make a search read every row.
const UBIQUITOUS_ROWS: usize = 64;

/// A text's terms with how often each occurs, in first-seen order, spelt
/// one after another into one buffer: a row's terms cost two allocations
/// however many they are (an open reads them for every record).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Terms {
    spelt: String,
    /// By term: where its spelling ends in `spelt` (it starts where the
    /// one before ends) and its frequency.
    ends: Vec<(u32, u32)>,
}

impl Terms {
    /// Each term with its frequency.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, u32)> + '_ {
        let mut start = 0;
        self.ends.iter().map(move |&(end, tf)| {
            let term = &self.spelt[start..end as usize];
            start = end as usize;
            (term, tf)
        })
    }
}

/// The terms of `text` with how often each occurs, in first-seen order.
pub(crate) fn terms(text: &str) -> Terms {
    // Every occurrence is spelt into `all`, then equal spellings are
    // counted by sorting: texts have tens of terms, where a sort of
    // indices beats hashing and allocates once.
    let mut all = String::new();
    let mut spans: Vec<(u32, u32)> = Vec::new();
    let mut add = |chars: &[char]| {
        let start = all.len() as u32;
        all.extend(chars);
        spans.push((start, all.len() as u32));
    };
    thread_local! {
        static SCRATCH: std::cell::RefCell<TokenScratch> = std::cell::RefCell::default();
    }
    SCRATCH.with_borrow_mut(|scratch| {
        for_each_token(text, scratch, |token| {
            if token.stopword || token.stem.is_empty() {
                return;
            }
            match token.script {
                Script::Alnum => add(token.stem),
                Script::Hangul | Script::Dense => {
                    let stem = token.stem;
                    if stem.len() == 1 {
                        add(stem);
                    } else {
                        for pair in stem.windows(2) {
                            add(pair);
                        }
                    }
                }
            }
        })
    });
    let spelling = |i: u32| {
        let (start, end) = spans[i as usize];
        &all[start as usize..end as usize]
    };
    // Occurrences by spelling, the first of each spelling first.
    let mut order: Vec<u32> = (0..spans.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| spelling(a).cmp(spelling(b)).then(a.cmp(&b)));
    // (first occurrence, frequency) of each spelling, in first-seen order.
    let mut firsts: Vec<(u32, u32)> = Vec::new();
    for (at, &i) in order.iter().enumerate() {
        if at > 0 && spelling(order[at - 1]) == spelling(i) {
            if let Some(last) = firsts.last_mut() {
                last.1 += 1;
            }
        } else {
            firsts.push((i, 1));
        }
    }
    firsts.sort_unstable();
    let mut out = Terms {
        spelt: String::with_capacity(firsts.iter().map(|&(i, _)| spelling(i).len()).sum()),
        ends: Vec::with_capacity(firsts.len()),
    };
    for (i, tf) in firsts {
        out.spelt.push_str(spelling(i));
        out.ends.push((out.spelt.len() as u32, tf));
    }
    out
}

/// The distinct terms of a query.
pub(crate) fn query_terms(text: &str) -> Vec<String> {
    terms(text).iter().map(|(t, _)| t.to_owned()).collect()
}

/// One row's place in a posting list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Posting {
    row: u32,
    tf: u32,
}

/// A partition's inverted index (see the module docs). Rows are the
/// partition's row numbers; the partition tells it of every push, change
/// and swap-remove.
#[derive(Debug, Clone, Default)]
pub(crate) struct Postings {
    /// Term → its id (an index into `lists`).
    ids: HashMap<Arc<str>, u32, RandomState>,
    /// By term id: its name (`None` once no row holds it).
    names: Vec<Option<Arc<str>>>,
    /// By term id: the rows holding it (in no particular order).
    lists: Vec<Vec<Posting>>,
    /// Ids of terms no row holds any more, for reuse.
    free: Vec<u32>,
    /// By row: its terms (id, frequency).
    forward: Vec<Box<[(u32, u32)]>>,
    /// By row: its length in terms.
    lengths: Vec<u32>,
    /// The sum of `lengths`.
    total: u64,
}

impl Postings {
    /// Rows indexed.
    pub(crate) fn len(&self) -> usize {
        self.forward.len()
    }

    fn term_id(&mut self, term: &str) -> u32 {
        if let Some(&id) = self.ids.get(term) {
            return id;
        }
        let name: Arc<str> = Arc::from(term);
        let id = match self.free.pop() {
            Some(id) => {
                self.names[id as usize] = Some(name.clone());
                id
            }
            None => {
                self.lists.push(Vec::new());
                self.names.push(Some(name.clone()));
                (self.lists.len() - 1) as u32
            }
        };
        self.ids.insert(name, id);
        id
    }

    fn forward_of(&mut self, terms: &Terms) -> Box<[(u32, u32)]> {
        terms.iter().map(|(t, tf)| (self.term_id(t), tf)).collect()
    }

    /// Indexes a new last row with `terms`.
    pub(crate) fn push(&mut self, terms: &Terms) {
        let row = self.forward.len() as u32;
        let forward = self.forward_of(terms);
        self.link(row, &forward);
        self.forward.push(forward);
    }

    /// Replaces the terms of `row`.
    pub(crate) fn replace(&mut self, row: usize, terms: &Terms) {
        let old = std::mem::take(&mut self.forward[row]);
        self.unlink(row as u32, &old);
        let forward = self.forward_of(terms);
        self.link(row as u32, &forward);
        self.forward[row] = forward;
    }

    /// Removes `row` and moves the last row into its place, as the
    /// partition's `swap_remove` does.
    pub(crate) fn swap_remove(&mut self, row: usize) {
        let last = self.forward.len() - 1;
        let gone = std::mem::take(&mut self.forward[row]);
        self.unlink(row as u32, &gone);
        if row != last {
            for &(term, _) in self.forward[last].iter() {
                let list = &mut self.lists[term as usize];
                // Rows are pushed in order, so the last row is near the end.
                if let Some(p) = list.iter_mut().rev().find(|p| p.row == last as u32) {
                    p.row = row as u32;
                }
            }
            self.lengths[row] = self.lengths[last];
        }
        self.forward.swap_remove(row);
        self.lengths.pop();
    }

    fn link(&mut self, row: u32, forward: &[(u32, u32)]) {
        let length: u32 = forward.iter().map(|(_, tf)| tf).sum();
        for &(term, tf) in forward {
            self.lists[term as usize].push(Posting { row, tf });
        }
        match self.lengths.get_mut(row as usize) {
            Some(l) => *l = length,
            None => self.lengths.push(length),
        }
        self.total += u64::from(length);
    }

    fn unlink(&mut self, row: u32, forward: &[(u32, u32)]) {
        for &(term, _) in forward {
            let list = &mut self.lists[term as usize];
            if let Some(p) = list.iter().rposition(|p| p.row == row) {
                list.swap_remove(p);
            }
            if list.is_empty() {
                // The term is gone from the partition: its name too.
                *list = Vec::new();
                if let Some(name) = self.names[term as usize].take() {
                    self.ids.remove(&name);
                }
                self.free.push(term);
            }
        }
        self.total -= u64::from(self.lengths[row as usize]);
        self.lengths[row as usize] = 0;
    }

    /// The query's terms this partition holds, with their weights (idf);
    /// terms in more than half the rows of a partition of
    /// [`UBIQUITOUS_ROWS`] or more are left out.
    pub(crate) fn weigh(&self, query: &[String]) -> Vec<(u32, f32)> {
        let rows = self.len();
        let n = rows as f32;
        query
            .iter()
            .filter_map(|t| self.ids.get(t.as_str()))
            .filter(|&&id| rows < UBIQUITOUS_ROWS || self.lists[id as usize].len() * 2 <= rows)
            .map(|&id| {
                let df = self.lists[id as usize].len() as f32;
                (id, (1.0 + (n - df + 0.5) / (df + 0.5)).ln())
            })
            .collect()
    }

    fn average_length(&self) -> f32 {
        if self.forward.is_empty() {
            1.0
        } else {
            (self.total as f32 / self.forward.len() as f32).max(1.0)
        }
    }

    /// One term's share of a row's score.
    fn part(idf: f32, tf: u32, length: u32, average: f32) -> f32 {
        let tf = tf as f32;
        idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length as f32 / average))
    }

    /// The BM25 score of `row` for the weighed query (0 when it holds none
    /// of its terms).
    pub(crate) fn score(&self, row: usize, weighed: &[(u32, f32)]) -> f32 {
        let (Some(forward), Some(&length)) = (self.forward.get(row), self.lengths.get(row)) else {
            return 0.0;
        };
        let average = self.average_length();
        weighed
            .iter()
            .filter_map(|&(term, idf)| {
                forward
                    .iter()
                    .find(|(t, _)| *t == term)
                    .map(|&(_, tf)| Self::part(idf, tf, length, average))
            })
            .sum()
    }

    /// Every row holding a term of the weighed query with its BM25 score,
    /// for rows `accept` takes (see the module docs for the terms left to
    /// the rarer ones in large partitions), in no particular order.
    pub(crate) fn search(&self, weighed: &[(u32, f32)], accept: impl Fn(usize) -> bool) -> Vec<(usize, f32)> {
        if weighed.is_empty() || self.forward.is_empty() {
            return Vec::new();
        }
        let rows = self.len();
        let common = |term: u32| rows > PRUNE_ROWS && self.lists[term as usize].len() * COMMON_SHARE > rows;
        let mut leading: Vec<(u32, f32)> = weighed.iter().copied().filter(|&(t, _)| !common(t)).collect();
        let mut trailing: Vec<(u32, f32)> = weighed.iter().copied().filter(|&(t, _)| common(t)).collect();
        if leading.is_empty() {
            // Only common terms: the rarest of them finds the candidates.
            trailing.sort_by_key(|&(t, _)| self.lists[t as usize].len());
            leading.push(trailing.remove(0));
        }
        let average = self.average_length();
        // Scores add up in an array by row, kept by the thread between
        // searches with every entry back at 0.0: a search writes only the
        // rows it finds and puts them back, where a fresh array costs a
        // zeroed allocation as large as the partition and a map a hash per
        // posting (1M records: partitions of 250k rows, common terms with
        // 25k postings each). A share is never 0.0 (idf and tf are
        // positive), so a row at 0.0 is one not found yet.
        let found: Vec<(u32, f32)> = SCORES.with(|scores| {
            let mut scores = scores.borrow_mut();
            if scores.len() < rows {
                scores.resize(rows, 0.0);
            }
            let mut touched: Vec<u32> = Vec::new();
            for &(term, idf) in &leading {
                for p in &self.lists[term as usize] {
                    let score = &mut scores[p.row as usize];
                    if *score == 0.0 {
                        touched.push(p.row);
                    }
                    *score += Self::part(idf, p.tf, self.lengths[p.row as usize], average);
                }
            }
            touched
                .into_iter()
                .map(|row| (row, std::mem::take(&mut scores[row as usize])))
                .collect()
        });
        let mut out: Vec<(usize, f32)> = Vec::with_capacity(found.len());
        for (row, mut score) in found {
            let row = row as usize;
            if !accept(row) {
                continue;
            }
            if !trailing.is_empty() {
                score += self.score(row, &trailing);
            }
            out.push((row, score));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(terms: &Terms) -> Vec<&str> {
        terms.iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn hangul_gives_bigrams_of_its_stems_and_latin_its_stems() {
        let t = terms("서울에서 행복주택 공고를 찾았어요. Running notices in SH!");
        assert_eq!(
            names(&t),
            ["서울", "행복", "복주", "주택", "공고", "찾", "run", "notic", "sh"]
        );
        let t = terms("집에 가는 길");
        assert!(names(&t).contains(&"집"), "a one-syllable stem is a term: {t:?}");
        let t = terms("東京タワー");
        assert_eq!(
            names(&t),
            ["東京", "京タ", "タワ", "ワー"],
            "Han and kana runs as bigrams"
        );
        assert!(
            terms("the of and 좀 ... !!") == Terms::default(),
            "function words say nothing"
        );
        let t = terms("공고 공고를 공고");
        assert_eq!(t.iter().collect::<Vec<_>>(), [("공고", 3)], "frequencies count");
        let t = terms("zulu kilo zulu lima kilo zulu 서울 부산 서울");
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            [("zulu", 3), ("kilo", 2), ("lima", 1), ("서울", 2), ("부산", 1)],
            "first-seen order, each counted once"
        );
    }

    fn index(texts: &[&str]) -> Postings {
        let mut p = Postings::default();
        for text in texts {
            p.push(&terms(text));
        }
        p
    }

    fn ranked(p: &Postings, query: &str) -> Vec<usize> {
        let weighed = p.weigh(&query_terms(query));
        let mut hits = p.search(&weighed, |_| true);
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.into_iter().map(|(r, _)| r).collect()
    }

    #[test]
    fn bm25_prefers_rare_terms_and_short_rows() {
        let p = index(&[
            "the dentist appointment is on Tuesday",
            "Tuesday dinner with Sam at the new place near the river and then a movie",
            "my dentist Dr Ahn moved to Busan",
            "dinner on Tuesday",
        ]);
        assert_eq!(ranked(&p, "when is the dentist?")[..2], [0, 2]);
        assert_eq!(
            ranked(&p, "dinner Tuesday"),
            [3, 1, 0],
            "a short row holding both first"
        );
        assert!(ranked(&p, "volcano").is_empty());
        let weighed = p.weigh(&query_terms("Ahn dentist"));
        let hits = p.search(&weighed, |_| true);
        for (row, score) in hits {
            assert!(
                (p.score(row, &weighed) - score).abs() < 1e-6,
                "one formula both ways"
            );
        }
    }

    #[test]
    fn removing_a_row_moves_the_last_and_leaves_no_term_behind() {
        let mut p = index(&["alpha beta", "secretword gamma", "delta alpha"]);
        p.swap_remove(1);
        assert_eq!(p.len(), 2);
        assert!(
            !p.ids.contains_key("secretword"),
            "a removed row's terms leave the index"
        );
        assert!(ranked(&p, "secretword").is_empty());
        assert_eq!(
            ranked(&p, "delta"),
            [1],
            "the last row took the removed one's place"
        );
        assert_eq!(ranked(&p, "alpha").len(), 2);
        assert_eq!(p.total, u64::from(p.lengths.iter().sum::<u32>()));
        p.replace(0, &terms("omega"));
        assert!(ranked(&p, "beta").is_empty());
        assert_eq!(ranked(&p, "omega"), [0]);
        // The freed id is reused, and its old name does not come back.
        p.push(&terms("zeta"));
        assert_eq!(ranked(&p, "zeta"), [2]);
        assert!(ranked(&p, "secretword").is_empty());
        p.swap_remove(2);
        p.swap_remove(1);
        p.swap_remove(0);
        assert_eq!((p.len(), p.total), (0, 0));
        assert!(p.ids.is_empty() && p.lists.iter().all(Vec::is_empty));
        assert!(p.names.iter().all(Option::is_none));
    }

    #[test]
    fn common_terms_only_add_to_rarer_ones_in_large_partitions() {
        let mut p = Postings::default();
        for i in 0..PRUNE_ROWS + 100 {
            let text = if i % 3 == 0 {
                format!("meeting agenda {i}")
            } else {
                format!("meeting {i}")
            };
            p.push(&terms(&text));
        }
        p.push(&terms("meeting agenda quarterly budget"));
        let last = p.len() - 1;
        let ranked = ranked(&p, "quarterly meeting agenda");
        assert_eq!(ranked, [last], "only rows the rare term finds are candidates");
        let weighed = p.weigh(&query_terms("quarterly meeting agenda"));
        let full: f32 = p.score(last, &weighed);
        let found = p.search(&weighed, |_| true);
        assert!(
            (found[0].1 - full).abs() < 1e-6,
            "the common terms still add their share"
        );
        // Only common terms: the rarest finds the candidates.
        assert_eq!(
            self::ranked(&p, "agenda").len(),
            (PRUNE_ROWS + 100).div_ceil(3) + 1
        );
        // A term in more than half the rows says nothing.
        assert!(self::ranked(&p, "meeting").is_empty());
        assert_eq!(self::ranked(&p, "meeting quarterly"), [last]);
    }
}
