//! Integration tests of jarvis-sdk: one binary, one module per subject.

mod assembler_props;
mod deps;
mod gate;
mod layers;
mod loop_concurrency;
mod loop_props;
mod loop_transcripts;
mod providers;
#[cfg(target_os = "linux")]
mod sandbox;
mod support;
