//! Integration tests of jarvis-sdk: one binary, one module per subject.

mod approvals;
mod assembler_props;
mod deps;
mod embed;
mod gate;
mod housing;
mod layers;
mod loop_concurrency;
mod loop_props;
mod loop_transcripts;
mod providers;
mod security;
mod support;
