//! Integration tests of jarvis-sdk: one binary, one module per subject.

mod agenda;
mod agent_session;
mod approvals;
mod assembler_props;
mod budgets;
mod capture;
mod continuity;
mod deps;
mod dual;
mod embed;
mod files;
mod focus;
mod gate;
mod goals;
mod harness;
mod housing;
mod jobs;
mod kinds;
mod layers;
mod learning;
mod loop_concurrency;
mod loop_props;
mod loop_transcripts;
mod mcp;
mod memory;
mod notify;
mod openloop;
mod pg;
mod proactive;
mod providers;
#[cfg(target_os = "linux")]
mod sandbox;
mod schedule;
mod security;
mod sessions_contract;
mod sessions_crash;
mod sessions_jsonl;
mod sessions_postgres;
#[cfg(feature = "sources")]
mod sources;
mod subagents;
mod support;
mod team;
mod thinking;
mod usage;
mod web;
