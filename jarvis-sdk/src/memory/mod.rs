//! The memory layer (SPEC.md §8): `MemoryService` with working memory and
//! semantic, episodic and procedural long-term memory, agent scopes, the one
//! injection point `observe`, and recall.
//!
//! It sits above `model` (it may use embedders) and below `agent` (the
//! harness calls it before and after each turn). Nothing is built here yet;
//! the module exists so the layer order is fixed and enforced from the start.
