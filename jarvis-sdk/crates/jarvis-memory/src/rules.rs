//! [`WRITE_RULES`] (R-MEM-6): the write path decides the layer.
//!
//! The rules are documented on [`WRITE_RULES`].

use super::record::Layer;

/// Where memories from one write path go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteRule {
    /// The write path (`source` of the record).
    pub source: &'static str,
    /// The layer it is written to.
    pub layer: Layer,
    /// The kind it gets.
    pub kind: &'static str,
}

/// Source of memories written with `/remember`.
pub const SOURCE_REMEMBER: &str = "remember";
/// Source of memories written by user-model distillation.
pub const SOURCE_USER_MODEL: &str = "user_model";
/// Source of facts extracted from episodes.
pub const SOURCE_EPISODE_FACT: &str = "episode_fact";
/// Source of turn episodes.
pub const SOURCE_TURN: &str = "turn";
/// Source of task patterns.
pub const SOURCE_TASK_PATTERN: &str = "task_pattern";
/// Source of procedures.
pub const SOURCE_PROCEDURE: &str = "procedure";

/// Kind of user-profile facts.
pub const KIND_FACT: &str = "fact";
/// Kind of user-model entries.
pub const KIND_USER_MODEL: &str = "user_model";
/// Kind of turn episodes.
pub const KIND_EPISODE: &str = "episode";
/// Kind of other episodic memories.
pub const KIND_NOTE: &str = "note";
/// Kind of task patterns.
pub const KIND_TASK_PATTERN: &str = "task_pattern";
/// Kind of procedures.
pub const KIND_PROCEDURE: &str = "procedure";

/// The write rules (R-MEM-6), one per known source.
///
/// A memory is written with a `source`, the path it came from. The table
/// maps each known source to its layer and kind; any other source is an
/// episodic `note` ([`DEFAULT_WRITE_RULE`]). The same table derives the
/// `kind` (and, when missing, the layer) of legacy Postgres rows from their
/// source during the backfill (R-MEM-14).
///
/// | source | written by | layer | kind |
/// |---|---|---|---|
/// | `remember` | `/remember` | semantic (the shared user profile) | `fact` |
/// | `user_model` | user-model distillation | semantic | `user_model` |
/// | `episode_fact` | facts extracted from episodes | semantic | `fact` |
/// | `turn` | the harness, after every turn | episodic | `episode` |
/// | `task_pattern` | `remember_task_pattern` | procedural | `task_pattern` |
/// | `procedure` | procedure learning, procedure files | procedural | `procedure` |
/// | anything else | | episodic | `note` |
///
/// Semantic records are read by every agent of the same user; episodic and
/// procedural ones by the writing agent and by agents that list it in their
/// `memory.read` (R-MEM-9).
pub const WRITE_RULES: &[WriteRule] = &[
    WriteRule {
        source: SOURCE_REMEMBER,
        layer: Layer::Semantic,
        kind: KIND_FACT,
    },
    WriteRule {
        source: SOURCE_USER_MODEL,
        layer: Layer::Semantic,
        kind: KIND_USER_MODEL,
    },
    WriteRule {
        source: SOURCE_EPISODE_FACT,
        layer: Layer::Semantic,
        kind: KIND_FACT,
    },
    WriteRule {
        source: SOURCE_TURN,
        layer: Layer::Episodic,
        kind: KIND_EPISODE,
    },
    WriteRule {
        source: SOURCE_TASK_PATTERN,
        layer: Layer::Procedural,
        kind: KIND_TASK_PATTERN,
    },
    WriteRule {
        source: SOURCE_PROCEDURE,
        layer: Layer::Procedural,
        kind: KIND_PROCEDURE,
    },
];

/// The rule for sources [`WRITE_RULES`] does not name: an episodic note in
/// the writing agent's scope.
pub const DEFAULT_WRITE_RULE: WriteRule = WriteRule {
    source: "",
    layer: Layer::Episodic,
    kind: KIND_NOTE,
};

/// The rule for memories from `source`.
pub fn write_rule(source: &str) -> WriteRule {
    WRITE_RULES
        .iter()
        .copied()
        .find(|r| r.source == source)
        .unwrap_or(WriteRule {
            source: "",
            ..DEFAULT_WRITE_RULE
        })
}

/// A SQL `CASE` expression over the column `source` giving the column
/// `field` (`kind` or `layer`) the rules assign; used by the backfill, so
/// the table above is the only place the mapping is written.
#[cfg(any(test, feature = "postgres"))]
pub(crate) fn sql_case(field: &str) -> String {
    let mut out = String::from("CASE source");
    for rule in WRITE_RULES {
        let value = match field {
            "layer" => rule.layer.as_str(),
            _ => rule.kind,
        };
        out.push_str(&format!(" WHEN '{}' THEN '{}'", rule.source, value));
    }
    let default = match field {
        "layer" => DEFAULT_WRITE_RULE.layer.as_str(),
        _ => DEFAULT_WRITE_RULE.kind,
    };
    out.push_str(&format!(" ELSE '{default}' END"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_profile_paths_are_semantic_and_the_rest_are_not() {
        for source in [SOURCE_REMEMBER, SOURCE_USER_MODEL, SOURCE_EPISODE_FACT] {
            assert_eq!(write_rule(source).layer, Layer::Semantic, "{source}");
        }
        assert_eq!(write_rule(SOURCE_TURN).layer, Layer::Episodic);
        assert_eq!(write_rule(SOURCE_TASK_PATTERN).layer, Layer::Procedural);
        assert_eq!(write_rule(SOURCE_PROCEDURE).layer, Layer::Procedural);
        let other = write_rule("whatever");
        assert_eq!((other.layer, other.kind), (Layer::Episodic, KIND_NOTE));
    }

    #[test]
    fn the_backfill_case_comes_from_the_table() {
        let kind = sql_case("kind");
        assert!(kind.starts_with("CASE source WHEN 'remember' THEN 'fact'"));
        assert!(kind.ends_with("ELSE 'note' END"));
        assert!(sql_case("layer").contains("WHEN 'turn' THEN 'episodic'"));
        // Sources are constants without quotes, so the expression is safe.
        assert!(WRITE_RULES.iter().all(|r| !r.source.contains('\'')));
    }
}
