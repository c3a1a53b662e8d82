//! Embedder tests: the offline hash embedder's vectors and retrieval
//! quality, and the HTTP embedders against replayed wire transcripts
//! (fixtures under `tests/fixtures/embed_*/`).

mod hash;
mod remote;
