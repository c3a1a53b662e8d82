//! The file tools: `read_file`, `list_dir` and `write_file`, each a thin
//! layer over the session's [`Sandbox`](super::Sandbox) that turns its
//! answers and refusals into text for the model.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use std::fmt::Write as _;
use std::sync::Arc;

use super::{BuiltinConfig, in_sandbox};
use crate::sandbox::{DirListing, EntryKind, FileContent, SandboxError};
use jarvis_agent::{ToolContext, ToolError, ToolResult, TypedTool};

/// Bytes looked at to tell a binary file from text.
const BINARY_SNIFF: usize = 8 * 1024;

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ReadFileArgs {
    /// The file's path, relative to your sandbox directory.
    path: String,
}

/// `read_file {path}`: the text of a file in the sandbox.
#[derive(Debug)]
pub(super) struct ReadFile {
    config: Arc<BuiltinConfig>,
}

impl ReadFile {
    pub(super) fn new(config: Arc<BuiltinConfig>) -> Self {
        Self { config }
    }
}

#[async_trait]
impl TypedTool for ReadFile {
    type Args = ReadFileArgs;

    fn name(&self) -> &str {
        "read_file"
    }

    fn sandbox_path_arguments(&self) -> &[&str] {
        &["path"]
    }

    fn description(&self) -> &str {
        "Reads a text file in your sandbox directory. `path` is relative to the sandbox; \
         absolute paths and paths leading outside it are refused. Long files are cut and say so."
    }

    async fn run(&self, args: ReadFileArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let cap = self.config.read_cap;
        let path = args.path.clone();
        let read = in_sandbox(&self.config, &ctx.session_id, move |sb| sb.read(&path, cap)).await?;
        Ok(match read {
            Ok(content) => render_file(&args.path, content),
            Err(e) => ToolResult::error(e.to_string()),
        })
    }
}

/// The file as text for the model: refused when it looks binary, decoded
/// lossily (and said so) when it is not valid UTF-8, with a note when cut.
fn render_file(path: &str, content: FileContent) -> ToolResult {
    let truncated = content.is_truncated();
    let sniff = &content.bytes[..content.bytes.len().min(BINARY_SNIFF)];
    if sniff.contains(&0) {
        return ToolResult::error(format!(
            "read_file: {path:?} looks like a binary file ({} bytes, it contains NUL bytes); \
             only text files can be read",
            content.size
        ));
    }
    let mut bytes = &content.bytes[..];
    if truncated {
        // A cut may split the last character; drop its partial bytes.
        if let Err(e) = std::str::from_utf8(bytes)
            && e.error_len().is_none()
        {
            bytes = &bytes[..e.valid_up_to()];
        }
    }
    let (mut text, lossy) = match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_owned(), false),
        Err(_) => (String::from_utf8_lossy(bytes).into_owned(), true),
    };
    if lossy {
        text.push_str("\n[note: the file is not valid UTF-8; invalid bytes are shown as U+FFFD]");
    }
    if truncated {
        let _ = write!(
            text,
            "\n[truncated: showing the first {} of {} bytes]",
            content.bytes.len(),
            content.size
        );
    }
    ToolResult::ok(text)
}

/// Arguments of `list_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ListDirArgs {
    /// The directory's path, relative to your sandbox directory; `.` (the
    /// default) is the sandbox itself.
    #[serde(default = "current_dir")]
    path: String,
}

fn current_dir() -> String {
    ".".to_owned()
}

/// `list_dir {path}`: the entries of a directory in the sandbox.
#[derive(Debug)]
pub(super) struct ListDir {
    config: Arc<BuiltinConfig>,
}

impl ListDir {
    pub(super) fn new(config: Arc<BuiltinConfig>) -> Self {
        Self { config }
    }
}

#[async_trait]
impl TypedTool for ListDir {
    type Args = ListDirArgs;

    fn name(&self) -> &str {
        "list_dir"
    }

    fn sandbox_path_arguments(&self) -> &[&str] {
        &["path"]
    }

    fn description(&self) -> &str {
        "Lists a directory in your sandbox: one line per entry with its kind (file, dir, symlink), \
         size in bytes and name, sorted by name. `path` is relative to the sandbox (default `.`)."
    }

    async fn run(&self, args: ListDirArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let cap = self.config.list_cap;
        let path = args.path.clone();
        let listing = in_sandbox(&self.config, &ctx.session_id, move |sb| sb.list(&path, cap)).await?;
        Ok(match listing {
            Ok(listing) => ToolResult::ok(render_listing(&listing)),
            Err(e) => ToolResult::error(e.to_string()),
        })
    }
}

fn render_listing(listing: &DirListing) -> String {
    if listing.total == 0 {
        return "(empty directory)".to_owned();
    }
    let mut out = String::new();
    for entry in &listing.entries {
        let slash = if entry.kind == EntryKind::Dir { "/" } else { "" };
        let _ = writeln!(
            out,
            "{:<7} {:>10}  {}{slash}",
            entry.kind.as_str(),
            entry.size,
            entry.name
        );
    }
    if listing.entries.len() < listing.total {
        let _ = writeln!(
            out,
            "[showing the first {} of {} entries]",
            listing.entries.len(),
            listing.total
        );
    }
    out.pop();
    out
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct WriteFileArgs {
    /// The file's path, relative to your sandbox directory; missing parent
    /// directories are created.
    path: String,
    /// The complete new content of the file (UTF-8 text).
    content: String,
}

/// `write_file {path, content}`: replaces a file in the sandbox atomically.
#[derive(Debug)]
pub(super) struct WriteFile {
    config: Arc<BuiltinConfig>,
}

impl WriteFile {
    pub(super) fn new(config: Arc<BuiltinConfig>) -> Self {
        Self { config }
    }
}

#[async_trait]
impl TypedTool for WriteFile {
    type Args = WriteFileArgs;

    fn name(&self) -> &str {
        "write_file"
    }

    fn sandbox_path_arguments(&self) -> &[&str] {
        &["path"]
    }

    fn description(&self) -> &str {
        "Writes a text file in your sandbox, replacing it whole if it exists and creating missing \
         parent directories. `path` is relative to the sandbox."
    }

    fn requires_approval(&self) -> bool {
        true
    }

    async fn run(&self, args: WriteFileArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let len = args.content.len();
        if len > self.config.write_cap {
            let e = SandboxError::TooLarge {
                len,
                max: self.config.write_cap,
            };
            return Ok(ToolResult::error(e.to_string()));
        }
        let path = args.path.clone();
        let written = in_sandbox(&self.config, &ctx.session_id, move |sb| {
            sb.write(&path, args.content.as_bytes())
        })
        .await?;
        Ok(match written {
            Ok(()) => ToolResult::ok(format!("wrote {len} bytes to {:?}", args.path)),
            Err(e) => ToolResult::error(e.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::DirEntryInfo;

    fn content(bytes: &[u8], size: u64) -> FileContent {
        FileContent {
            bytes: bytes.to_vec(),
            size,
        }
    }

    #[test]
    fn text_is_returned_as_is() {
        let r = render_file("a", content("안녕\n".as_bytes(), 7));
        assert_eq!(r, ToolResult::ok("안녕\n"));
    }

    #[test]
    fn a_cut_inside_a_character_is_not_called_invalid() {
        // "안" is 3 bytes; keep 2 of them.
        let r = render_file("a", content(&"가안".as_bytes()[..5], 6));
        assert!(!r.is_error);
        assert_eq!(r.content, "가\n[truncated: showing the first 5 of 6 bytes]");
    }

    #[test]
    fn invalid_utf8_is_lossy_with_a_note_and_binary_is_refused() {
        let r = render_file("a", content(b"ok \xff!", 5));
        assert!(!r.is_error);
        assert!(r.content.starts_with("ok \u{fffd}!"));
        assert!(r.content.contains("not valid UTF-8"));
        let r = render_file("b.bin", content(b"\x7fELF\0\0", 6));
        assert!(r.is_error && r.content.contains("binary"), "{r:?}");
    }

    #[test]
    fn listings_show_kind_size_and_a_cap_note() {
        let listing = DirListing {
            entries: vec![
                DirEntryInfo {
                    name: "a.txt".into(),
                    kind: EntryKind::File,
                    size: 12,
                },
                DirEntryInfo {
                    name: "sub".into(),
                    kind: EntryKind::Dir,
                    size: 4096,
                },
            ],
            total: 3,
        };
        assert_eq!(
            render_listing(&listing),
            "file            12  a.txt\ndir           4096  sub/\n[showing the first 2 of 3 entries]"
        );
        let empty = DirListing {
            entries: vec![],
            total: 0,
        };
        assert_eq!(render_listing(&empty), "(empty directory)");
    }
}
