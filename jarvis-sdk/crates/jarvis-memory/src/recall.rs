//! How recall ranks what the store found: the two rankings of a search
//! (by vector and by words) fused by reciprocal rank, the period a
//! question names, then recency and rehearsal.
//!
//! **Fusion.** A search answers the records most similar to the query's
//! vector (at or above the similarity floor) and the records best by BM25
//! for its words (see `lexical.rs`), each hit with both scores. Each side
//! is ranked on its own, and a record's relevance is its reciprocal-rank
//! fusion (Cormack, Clarke and Büttcher, SIGIR 2009): the sum over the
//! rankings it is in of `1 / (k + rank)`, divided by the most a record
//! could get (first everywhere), so it lies in `(0, 1]`. Ranks, not
//! scores, are fused: a cosine of the hash embedder and one of a neural
//! model mean different things, and BM25 has no fixed scale, so no weight
//! tuned for one embedder is applied to another. Words that barely match
//! do not rank: a word hit needs at least a quarter of the best word
//! hit's score ([`LEXICAL_SHARE`]).
//!
//! **Periods.** When a question names a period ("last month", "3월에"),
//! the same search runs again inside it, and its two rankings are fused
//! with the others: what happened then ranks above what only looks alike.
//!
//! **Recency and rehearsal** reorder what relevance ranks close together:
//! `score = relevance·w_r + recency·w_t + rehearsal·w_h` (see
//! [`RecallWeights`](super::RecallWeights)). A memory that is the only
//! match is first in every ranking, so no newer one that matches less
//! overtakes it.

use super::record::SearchHit;

/// A word hit ranks when its BM25 score is at least this share of the
/// best word hit's.
pub(super) const LEXICAL_SHARE: f32 = 0.25;

/// The fused relevance of every hit of `answers` (the general search
/// first, then searches inside a period), by id, with the hit itself.
///
/// `floor` is the similarity a vector hit of the general search needs;
/// inside a period every hit ranks. `k` is the fusion's
/// constant (60 in the paper; smaller makes first places count more).
pub(super) fn fuse(answers: Vec<Vec<SearchHit>>, floor: f32, k: f32) -> Vec<(SearchHit, f32)> {
    let mut fused: Vec<(SearchHit, f32)> = Vec::new();
    // What a record first in every general ranking gets.
    let mut best = 0.0f32;
    for (i, hits) in answers.into_iter().enumerate() {
        let general = i == 0;
        // Inside a period every record searched ranks, by similarity.
        let floor = if general { floor } else { f32::NEG_INFINITY };
        let top_words = hits.iter().map(|h| h.lexical).fold(0.0f32, f32::max);
        let mut by_vector: Vec<usize> = (0..hits.len()).filter(|&h| hits[h].similarity >= floor).collect();
        by_vector.sort_by(|&a, &b| {
            hits[b]
                .similarity
                .total_cmp(&hits[a].similarity)
                .then_with(|| hits[a].id.cmp(&hits[b].id))
        });
        let mut by_words: Vec<usize> = (0..hits.len())
            .filter(|&h| hits[h].lexical > 0.0 && hits[h].lexical >= LEXICAL_SHARE * top_words)
            .collect();
        by_words.sort_by(|&a, &b| {
            hits[b]
                .lexical
                .total_cmp(&hits[a].lexical)
                .then_with(|| hits[a].id.cmp(&hits[b].id))
        });
        if general {
            best = [by_vector.len(), by_words.len()]
                .iter()
                .filter(|&&n| n > 0)
                .count() as f32
                / (k + 1.0);
        }
        let mut shares = vec![0.0f32; hits.len()];
        for ranking in [&by_vector, &by_words] {
            for (rank, &h) in ranking.iter().enumerate() {
                shares[h] += 1.0 / (k + rank as f32 + 1.0);
            }
        }
        for (hit, share) in hits.into_iter().zip(shares) {
            if share == 0.0 {
                continue;
            }
            // Few hits: a scan finds a record already fused from an
            // earlier search faster than hashing every id would.
            match fused.iter_mut().find(|(h, _)| h.id == hit.id) {
                Some((_, f)) => *f += share,
                None => fused.push((hit, share)),
            }
        }
    }
    let best = if best > 0.0 { best } else { 1.0 / (k + 1.0) };
    for (_, f) in &mut fused {
        *f /= best;
    }
    fused
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_common::Timestamp;

    fn hit(id: &str, similarity: f32, lexical: f32) -> SearchHit {
        SearchHit {
            id: id.into(),
            similarity,
            lexical,
            created_at: Timestamp::from_millis(0),
            rehearsal: 0,
            prev: None,
            next: None,
        }
    }

    fn ranked(answers: Vec<Vec<SearchHit>>) -> Vec<(String, f32)> {
        let mut out: Vec<(String, f32)> = fuse(answers, 0.2, 60.0)
            .into_iter()
            .map(|(h, f)| (h.id, f))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }

    #[test]
    fn first_on_both_sides_is_one_and_either_side_counts() {
        let r = ranked(vec![vec![
            hit("both", 0.9, 5.0),
            hit("vector", 0.8, 0.0),
            hit("words", 0.1, 4.0),
            hit("neither", 0.1, 0.5),
        ]]);
        assert_eq!(r[0], ("both".into(), 1.0));
        let ids: Vec<&str> = r.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(
            ids,
            ["both", "vector", "words"],
            "below the floor and a weak word match rank nowhere"
        );
        assert!((r[1].1 - r[2].1).abs() < 1e-6, "second on one side each: alike");
    }

    #[test]
    fn one_side_alone_still_reaches_one() {
        let r = ranked(vec![vec![hit("only", 0.0, 3.0), hit("other", 0.0, 2.0)]]);
        assert_eq!(
            r[0],
            ("only".into(), 1.0),
            "no vector side (the embedder is down)"
        );
    }

    #[test]
    fn a_period_adds_its_own_rankings() {
        let general = vec![hit("old", 0.9, 4.0), hit("then", 0.5, 3.0)];
        let during = vec![hit("then", 0.5, 3.0)];
        let r = ranked(vec![general, during]);
        assert_eq!(r[0].0, "then", "what happened in the period ranks first: {r:?}");
        assert!(r[0].1 > 1.0);
    }
}
