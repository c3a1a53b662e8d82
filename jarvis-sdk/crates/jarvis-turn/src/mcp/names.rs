//! The names MCP tools go by: `<server>__<tool>`, every character outside
//! `[A-Za-z0-9_-]` replaced by `_`; a name over 64 characters keeps its
//! first 55, then `_`, then the first 8 hex digits (lowercase, of the
//! 16-digit big-endian form) of the FNV-1a-64 hash of the full
//! `<server>__<tool>` as the server wrote it; names that still collide get
//! `_2`, `_3`, … in `tools/list` order.
//!
//! 64 characters is the longest tool name the model APIs accept, and the
//! characters are the ones all of them accept.

/// The longest tool name, in characters.
pub const MAX_TOOL_NAME: usize = 64;
/// What a name over [`MAX_TOOL_NAME`] keeps of its beginning.
const KEPT: usize = 55;

/// The separator between the server's name and the tool's.
pub(crate) const SEPARATOR: &str = "__";

/// FNV-1a, 64 bits.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The tool name of `tool` of `server`, before collisions are settled.
///
/// ```
/// use jarvis_turn::mcp_tool_name;
///
/// assert_eq!(mcp_tool_name("time", "get_current_time"), "time__get_current_time");
/// assert_eq!(mcp_tool_name("files", "read.file"), "files__read_file");
/// assert_eq!(mcp_tool_name("s", &"x".repeat(80)).len(), 64);
/// ```
pub fn mcp_tool_name(server: &str, tool: &str) -> String {
    let full = format!("{server}{SEPARATOR}{tool}");
    let clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_TOOL_NAME {
        return clean;
    }
    let hash = format!("{:016x}", fnv1a64(full.as_bytes()));
    format!("{}_{}", &clean[..KEPT], &hash[..8])
}

/// The names of a server's tools, in `tools/list` order: [`mcp_tool_name`]
/// of each, a repeated name followed by `_2`, `_3`, … (shortened to stay
/// within [`MAX_TOOL_NAME`]).
pub fn assign_tool_names<'a>(server: &str, tools: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for tool in tools {
        let base = mcp_tool_name(server, tool);
        let mut name = base.clone();
        let mut n = 2;
        while names.contains(&name) {
            let suffix = format!("_{n}");
            let keep = base.len().min(MAX_TOOL_NAME - suffix.len());
            name = format!("{}{suffix}", &base[..keep]);
            n += 1;
        }
        names.push(name);
    }
    names
}

/// Whether `name` has the form `<a>__<b>` of an MCP tool name or glob
/// (both sides non-empty).
pub fn is_mcp_name(name: &str) -> bool {
    name.split_once(SEPARATOR)
        .is_some_and(|(server, tool)| !server.is_empty() && !tool.is_empty())
}

/// Whether a `tools` entry of a definition (`<server>__<tool>` or
/// `<server>__*`) names the MCP tool `tool_name` of `server`.
pub fn pattern_matches(pattern: &str, server: &str, tool_name: &str) -> bool {
    match pattern.strip_suffix("__*") {
        Some(prefix) => prefix == server && tool_name.starts_with(&format!("{server}{SEPARATOR}")),
        None => pattern == tool_name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_published_test_vectors() {
        // http://www.isthe.com/chongo/src/fnv/test_fnv.c
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn characters_outside_the_set_become_underscores() {
        assert_eq!(mcp_tool_name("everything", "get-sum"), "everything__get-sum");
        assert_eq!(mcp_tool_name("fs", "read file/v2"), "fs__read_file_v2");
        assert_eq!(mcp_tool_name("fs", "länge"), "fs__l_nge");
    }

    #[test]
    fn long_names_keep_55_characters_and_a_hash_of_the_full_name() {
        let tool = "a".repeat(70);
        let name = mcp_tool_name("server", &tool);
        assert_eq!(name.len(), 64);
        let full = format!("server__{tool}");
        let hash = format!("{:016x}", fnv1a64(full.as_bytes()));
        assert_eq!(name, format!("{}_{}", &full[..55], &hash[..8]));
        // Two long names sharing their first 55 characters stay apart.
        let other = mcp_tool_name("server", &format!("{}b", "a".repeat(69)));
        assert_ne!(name, other);
        assert_eq!(name[..55], other[..55]);
        // Exactly 64 is kept as it is.
        let exact = "t".repeat(64 - "server__".len());
        assert_eq!(mcp_tool_name("server", &exact), format!("server__{exact}"));
    }

    #[test]
    fn collisions_are_numbered_in_list_order() {
        let names = assign_tool_names("s", ["a.b", "a_b", "a b", "c"]);
        assert_eq!(names, ["s__a_b", "s__a_b_2", "s__a_b_3", "s__c"]);
        let long = "x".repeat(80);
        let names = assign_tool_names("s", [long.as_str(), long.as_str()]);
        assert_eq!(names[0].len(), 64);
        assert_eq!(names[1].len(), 64);
        assert!(names[1].ends_with("_2"));
        assert_ne!(names[0], names[1]);
    }

    #[test]
    fn patterns_and_names() {
        assert!(is_mcp_name("time__get_current_time"));
        assert!(is_mcp_name("time__*"));
        assert!(!is_mcp_name("read_file"));
        assert!(!is_mcp_name("__x"));
        assert!(pattern_matches("time__*", "time", "time__now"));
        assert!(!pattern_matches("time__*", "timer", "timer__now"));
        assert!(pattern_matches("time__now", "time", "time__now"));
        assert!(!pattern_matches("time__now", "time", "time__then"));
    }
}
