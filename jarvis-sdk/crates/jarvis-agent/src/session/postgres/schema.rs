//! The store's SQL: the schema's migrations, and the statements whose text
//! is built from parts (the last `seq`, the append, fenced or not).

/// Key of the advisory lock the migrations hold (`jarvis` in ASCII, then 1).
pub(super) const MIGRATION_LOCK: i64 = 0x6a61_7276_6973_0001;

pub(super) const MIGRATIONS: &str = r#"
CREATE TABLE IF NOT EXISTS jarvis_sessions (
    id TEXT PRIMARY KEY
);
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS agent_id TEXT NOT NULL DEFAULT 'main';
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS title TEXT;
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS created_at TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS updated_at TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS parent_id TEXT;
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS kind TEXT NOT NULL DEFAULT 'user';
CREATE TABLE IF NOT EXISTS jarvis_migrations (
    name TEXT PRIMARY KEY,
    at TIMESTAMPTZ NOT NULL DEFAULT now()
);
WITH first AS (
    INSERT INTO jarvis_migrations (name) VALUES ('sessions-job-kind') ON CONFLICT DO NOTHING RETURNING name
)
UPDATE jarvis_sessions SET kind = 'job'
WHERE kind = 'user' AND id LIKE 'sched-%' AND EXISTS (SELECT 1 FROM first);
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS caller TEXT;
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS callee TEXT;
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS sub_origin TEXT;
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS last_seq BIGINT;
CREATE TABLE IF NOT EXISTS jarvis_entries (
    session_id TEXT NOT NULL REFERENCES jarvis_sessions (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
ALTER TABLE jarvis_entries ADD COLUMN IF NOT EXISTS ts TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE jarvis_entries ADD COLUMN IF NOT EXISTS v INTEGER NOT NULL DEFAULT 1;
ALTER TABLE jarvis_entries ADD COLUMN IF NOT EXISTS starts_turn BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE jarvis_entries ADD COLUMN IF NOT EXISTS body JSONB NOT NULL DEFAULT '{}'::jsonb;
CREATE INDEX IF NOT EXISTS jarvis_entries_turns ON jarvis_entries (session_id, seq) WHERE starts_turn;
"#;

/// A session's last `seq`: the larger of its row's `last_seq` (unset on
/// rows from before it existed) and its highest entry (one step down the
/// primary key), so entries written without moving `last_seq` (by an older
/// version) are counted too. A macro, so the statements using it are
/// constants.
macro_rules! last_seq {
    () => {
        "GREATEST(COALESCE(last_seq, 0), (SELECT COALESCE(MAX(seq), 0) FROM jarvis_entries WHERE session_id = $1))"
    };
}

/// A session's last `seq` ([`last_seq!`]); no row when there is no such
/// session.
pub(super) const LAST_SEQ: &str = concat!("SELECT ", last_seq!(), " FROM jarvis_sessions WHERE id = $1");

/// The append statement, with `$lease` (a CTE before the others), `$last`
/// (the session's last `seq`) and `$guard` (a condition on the session's
/// row) for the fenced one.
macro_rules! append {
    ($lease:literal, $last:expr, $guard:literal) => {
        concat!(
            "WITH ",
            $lease,
            "s AS ( \
               UPDATE jarvis_sessions SET updated_at = GREATEST(updated_at, $2), last_seq = ",
            $last,
            " + cardinality($4::BOOLEAN[]) \
               WHERE id = $1",
            $guard,
            " RETURNING last_seq - cardinality($4::BOOLEAN[]) AS base \
             ), ins AS ( \
               INSERT INTO jarvis_entries (session_id, seq, ts, v, starts_turn, body) \
               SELECT $1, s.base + u.n, $2, $3, u.starts, u.body \
               FROM s, UNNEST($4::BOOLEAN[], $5::JSONB[]) WITH ORDINALITY AS u(starts, body, n) \
             ) SELECT base FROM s"
        )
    };
}

/// Appends a batch in one statement: `$1` session, `$2` time, `$3` schema
/// version, `$4` which entries start a turn, `$5` the bodies. Answers the
/// `seq` before the batch; no row when there is no such session. Updating
/// the row locks it, so a concurrent append waits, and then sees the
/// `last_seq` the other one left (Postgres re-reads a row updated under a
/// waiting update), never a number already taken.
pub(super) const APPEND: &str = append!("", last_seq!(), "");

/// [`APPEND`] for a node holding a lease: `$6` the node, `$7` its token,
/// `$8` the ids of the turns whose blocks the batch holds. The statement
/// locks the lease row (`FOR SHARE`): a takeover (an update of the row)
/// waits for a write under way, and a write after a takeover re-reads the
/// row, finds another token and writes nothing (no row answered). The row
/// is rewritten only to clear the running turn once its block is written
/// (`c`), so most appends add no version of the lease row. Every writer of
/// a deployment moves `last_seq`, so the highest entry is read only for a
/// row that has none yet.
pub(super) const APPEND_FENCED: &str = append!(
    "l AS (SELECT 1 FROM jarvis_leases WHERE session_id = $1 AND node = $6 AND token = $7 FOR SHARE), \
     c AS (UPDATE jarvis_leases SET turn = NULL \
       WHERE session_id = $1 AND node = $6 AND token = $7 AND turn->>'turn_id' = ANY($8::TEXT[]) \
       AND EXISTS (SELECT 1 FROM l)), ",
    "COALESCE(last_seq, (SELECT COALESCE(MAX(seq), 0) FROM jarvis_entries WHERE session_id = $1))",
    " AND EXISTS (SELECT 1 FROM l)"
);

pub(super) const META_COLUMNS: &str =
    "id, agent_id, title, created_at, updated_at, parent_id, kind, caller, callee, sub_origin";
