//! Domain packs written against the crate's public API only, the way a
//! third party would write one ([`Pack`](crate::Pack)): an app has a pack's
//! tools, jobs, source kinds and team files when its config names the pack
//! ([`AppConfig::with_pack`](crate::AppConfig::with_pack)).
//!
//! Each folder here is one pack behind the cargo feature of the same name,
//! off by default, so an embedder compiles only the domains it turns on.
//! The build script declares the folders whose feature is on; `cargo fmt`
//! does not reach them through `lib.rs`, so CI formats them by path.

include!(concat!(env!("OUT_DIR"), "/packs.rs"));
