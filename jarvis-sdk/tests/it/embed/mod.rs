//! Embedder tests: the offline hash embedder's vectors and retrieval
//! quality, the HTTP embedders against replayed wire transcripts
//! (fixtures under `tests/fixtures/embed_*/`), and the embedder an app
//! chooses from `JARVIS_EMBED__*`.

mod choose;
mod hash;
mod remote;
