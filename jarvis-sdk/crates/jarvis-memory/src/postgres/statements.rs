//! The SQL of the store's reads and writes: the refresh, the upserts and
//! the rehearsals, each taking the write lock in a statement of its own.

use deadpool_postgres::GenericClient;
use std::sync::LazyLock;
use std::time::SystemTime;
use tokio_postgres::types::{Json, ToSql};

use super::WRITE_LOCK;
use crate::record::MemoryRecord;

/// Takes the write lock (its key the statement's last parameter) inside a
/// single statement's own transaction: the guard `EXISTS (SELECT 1 FROM
/// write_lock)` is evaluated once, before the statement's first row is
/// stamped from the sequence, and the lock is held until the statement
/// commits, as a transaction of [`PostgresMemoryStore::write`](super::PostgresMemoryStore::write) holds it,
/// in one round trip instead of four.
macro_rules! locked {
    ($key:literal) => {
        concat!(
            "WITH write_lock AS (SELECT pg_advisory_xact_lock(",
            $key,
            "::BIGINT)) "
        )
    };
}

/// Rows of each table a refresh reads per round trip.
pub(super) const REFRESH_PAGE: i64 = 10_000;

/// The rows of both tables past `seq` `$1`, at most `$2` of each, in `seq`
/// order: a record's columns (`id`, `user_id`, `agent_id`, `layer`,
/// `kind`, `source`, `text`, `metadata`, `created_at`, `rehearsal`,
/// `embedding_f32`, `embedder`), `seq`, then `gone` and `light`.
/// Tombstones (`gone`) carry only their id and `seq`. A row whose content
/// was written at or before `$1` (`written_seq`, which a rehearsal sets
/// to the `seq` it had before) and has since only been rehearsed comes
/// `light`: without text, metadata or vector, which the mirror already
/// holds, so a turn's rehearsals come back as a few bytes each.
///
/// `$3` is always `i64::MAX`: bounded on both sides, `seq` is a range
/// the planner takes for a small share of the table whatever the values,
/// so the plan it keeps for the prepared statement walks the `seq` index
/// in order (with [`PLANNER_SETTINGS`](super::PLANNER_SETTINGS)) rather than collecting and sorting
/// a third of the table. A plan that scanned the table cost 1–6 ms per
/// refresh at 10,000 records, against tenths of a millisecond walking the
/// index; sending the statement unnamed to have it planned for the values
/// at hand avoided that but paid its parse and plan every turn (0.5–0.9
/// ms of the server's time at 1,000 records).
pub(super) fn refresh_statement() -> &'static str {
    const FRESH: &str = "COALESCE(written_seq, seq) > $1";
    static STATEMENT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "(SELECT id, user_id, agent_id, layer, kind, source, \
               CASE WHEN {FRESH} THEN text ELSE '' END, \
               CASE WHEN {FRESH} THEN metadata ELSE '{{}}'::jsonb END, created_at, rehearsal, \
               CASE WHEN {FRESH} THEN embedding_f32 END, embedder, seq, false AS gone, NOT {FRESH} AS light \
             FROM jarvis_ltm_entries WHERE seq > $1 AND seq <= $3 ORDER BY seq LIMIT $2) \
             UNION ALL \
             (SELECT id, '', '', '', '', '', '', '{{}}'::jsonb, now(), 0, NULL::real[], '', seq, true, false \
             FROM jarvis_ltm_deleted WHERE seq > $1 AND seq <= $3 ORDER BY seq LIMIT $2) \
             ORDER BY seq"
        )
    });
    &STATEMENT
}

/// The upsert of one record, `$1`–`$12` its columns; every write of a
/// record's content goes through it, so it clears `written_seq` (see
/// [`refresh_statement`]).
macro_rules! upsert_record {
    () => {
        "INSERT INTO jarvis_ltm_entries \
           (id, user_id, agent_id, layer, kind, source, text, metadata, created_at, rehearsal, embedding_f32, embedder) \
         SELECT $1::TEXT, $2::TEXT, $3::TEXT, $4::TEXT, $5::TEXT, $6::TEXT, $7::TEXT, $8::JSONB, \
           $9::TIMESTAMPTZ, $10::INTEGER, $11::REAL[], $12::TEXT WHERE EXISTS (SELECT 1 FROM write_lock) \
         ON CONFLICT (id) DO UPDATE SET user_id = EXCLUDED.user_id, agent_id = EXCLUDED.agent_id, \
           layer = EXCLUDED.layer, kind = EXCLUDED.kind, source = EXCLUDED.source, text = EXCLUDED.text, \
           metadata = EXCLUDED.metadata, created_at = EXCLUDED.created_at, rehearsal = EXCLUDED.rehearsal, \
           embedding_f32 = EXCLUDED.embedding_f32, embedder = EXCLUDED.embedder, written_seq = NULL, \
           seq = nextval('jarvis_ltm_entries_seq')"
    };
}

/// The upsert of one record (`$1`–`$12` its columns, `$13` the write
/// lock's key), a statement of its own; answers the `seq` it stamped.
const UPSERT: &str = concat!(locked!("$13"), upsert_record!(), " RETURNING seq");

/// The rehearsals of the records named in the array `$ids` (a record
/// named `n` times, `n` rehearsals more), except the record `$except`:
/// an `UPDATE` that answers each record's id, new `seq` and count. Its
/// plan looks each record up by its key ([`PLANNER_SETTINGS`](super::PLANNER_SETTINGS)).
macro_rules! touch_rows {
    ($ids:literal, $except:literal) => {
        concat!(
            "UPDATE jarvis_ltm_entries AS e SET rehearsal = e.rehearsal + t.n, \
               written_seq = COALESCE(e.written_seq, e.seq), seq = nextval('jarvis_ltm_entries_seq') \
             FROM (SELECT id, count(*)::INTEGER AS n FROM unnest(",
            $ids,
            "::TEXT[]) AS id GROUP BY id) AS t \
             WHERE e.id = t.id AND e.id IS DISTINCT FROM ",
            $except,
            " AND EXISTS (SELECT 1 FROM write_lock) RETURNING e.id, e.seq, e.rehearsal"
        )
    };
}

/// [`UPSERT`], the rehearsals a recall left for it (`$18`, as
/// [`TOUCH`]'s `$1`; a rehearsal of the record written is dropped: the
/// write's count is the last word) and the working memory of a session
/// (`$14`–`$17`: session, user, agent, body) in one statement: what the
/// end of a turn writes, in one round trip, all or nothing. The upsert
/// and the rehearsals are data-modifying `WITH` steps, which run to
/// completion whether or not the statement reads them; they change
/// different rows. Answers the `seq` the record was stamped with, then
/// the rehearsed records' ids, `seq`s and counts.
pub(super) const UPSERT_WITH_WORKING: &str = concat!(
    locked!("$13"),
    ", touched AS (",
    touch_rows!("$18", "$1::TEXT"),
    "), episode AS (",
    upsert_record!(),
    " RETURNING seq) ",
    "INSERT INTO jarvis_working_memory (session_id, user_id, agent_id, body, updated_at) \
     VALUES ($14::TEXT, $15::TEXT, $16::TEXT, $17::JSONB, now()) ON CONFLICT (session_id) DO UPDATE SET \
     user_id = EXCLUDED.user_id, agent_id = EXCLUDED.agent_id, body = EXCLUDED.body, \
     updated_at = EXCLUDED.updated_at RETURNING (SELECT seq FROM episode), \
     ARRAY(SELECT id FROM touched), ARRAY(SELECT seq FROM touched), ARRAY(SELECT rehearsal FROM touched)"
);

/// The rehearsals of the records named in `$1` ([`touch_rows`]; `$2` the
/// write lock's key), a statement of its own, prepared once per
/// connection. Answers each record's id, new `seq` and count.
pub(super) const TOUCH: &str = concat!(locked!("$2"), touch_rows!("$1", "NULL::TEXT"));

/// The values of a record's columns, `$1`–`$12` of [`UPSERT`] and
/// [`UPSERT_WITH_WORKING`], in their order.
pub(super) struct RecordColumns<'a> {
    record: &'a MemoryRecord,
    layer: &'a str,
    metadata: Json<&'a serde_json::Value>,
    created_at: SystemTime,
    rehearsal: i32,
    embedding: Option<&'a [f32]>,
}

impl<'a> RecordColumns<'a> {
    pub(super) fn of(record: &'a MemoryRecord) -> Self {
        Self {
            record,
            layer: record.layer.as_str(),
            metadata: Json(&record.metadata),
            created_at: record.created_at.to_system_time(),
            rehearsal: i32::try_from(record.rehearsal).unwrap_or(i32::MAX),
            embedding: (!record.embedding.is_empty()).then_some(record.embedding.as_slice()),
        }
    }

    pub(super) fn params(&'a self) -> Vec<&'a (dyn ToSql + Sync)> {
        let r = self.record;
        vec![
            &r.id,
            &r.user,
            &r.agent_id,
            &self.layer,
            &r.kind,
            &r.source,
            &r.text,
            &self.metadata,
            &self.created_at,
            &self.rehearsal,
            &self.embedding,
            &r.embedder,
        ]
    }
}

/// Writes `record` ([`UPSERT`]); answers the `seq` it was stamped with.
pub(super) async fn upsert(
    client: &impl GenericClient,
    record: &MemoryRecord,
) -> Result<i64, tokio_postgres::Error> {
    let stmt = client.prepare_cached(UPSERT).await?;
    let columns = RecordColumns::of(record);
    let mut params = columns.params();
    params.push(&WRITE_LOCK);
    client.query_one(&stmt, &params).await?.try_get(0)
}
