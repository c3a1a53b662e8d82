//! Provider tests: wire transcripts (fixtures under `tests/fixtures/`, each
//! citing the API documentation it was written from) decoded directly,
//! decoded at every byte split, and replayed over HTTP by a local server.

mod anthropic;
mod fixtures;
mod ollama;
mod openai;
mod replay;
