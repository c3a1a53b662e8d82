//! Provider tests: wire transcripts (fixtures under `tests/fixtures/`, each
//! citing the API documentation it was written from) decoded directly,
//! decoded at every byte split, and replayed over HTTP by a local server.
//! The embedder tests reuse the fixture loader and the replay server.

mod anthropic;
mod discover;
pub(crate) mod fixtures;
mod ollama;
mod openai;
pub(crate) mod replay;
