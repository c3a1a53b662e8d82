//! The assembly layer (SPEC.md §10): `AgentProfile`, `AgentRegistry`,
//! `build_app` and `AppAssembly`, the one assembly result every screen
//! consumes.
//!
//! It is the top layer of the SDK. Nothing is built here yet; the module
//! exists so the layer order is fixed and enforced from the start.
