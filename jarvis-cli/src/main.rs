//! The `jarvis` command.
fn main() {}
