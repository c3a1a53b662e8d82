//! Lines of a history file: the next line read within the line limit, an
//! entry parsed from a line, and the entries of a byte range.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use crate::session::{ENTRY_SCHEMA_VERSION, SessionEntry, SessionError};

/// One entry from a line (its newline, if any, included).
pub(super) fn parse(line: &[u8]) -> Result<SessionEntry, String> {
    let text = line.strip_suffix(b"\n").unwrap_or(line);
    let entry: SessionEntry = serde_json::from_slice(text).map_err(|e| e.to_string())?;
    if entry.v != ENTRY_SCHEMA_VERSION {
        return Err(format!("unknown schema version {}", entry.v));
    }
    Ok(entry)
}

/// Reads the whole lines between bytes `from` and `to` of `path`, skipping
/// damaged and oversized ones (they were reported when the session loaded).
pub(super) fn read_range(
    path: &Path,
    from: u64,
    to: u64,
    limit: usize,
) -> Result<Vec<SessionEntry>, SessionError> {
    let mut file = File::open(path).map_err(SessionError::io("open", path))?;
    file.seek(SeekFrom::Start(from))
        .map_err(SessionError::io("read", path))?;
    let mut reader = BufReader::with_capacity(256 << 10, file.take(to - from));
    let mut buf = Vec::new();
    let mut entries = Vec::new();
    while let Some(line) = next_line(&mut reader, &mut buf, limit).map_err(SessionError::io("read", path))? {
        if line.terminated
            && !line.oversized
            && let Ok(entry) = parse(&buf)
        {
            entries.push(entry);
        }
    }
    Ok(entries)
}

pub(super) struct Line {
    /// Bytes the line takes in the file, newline included.
    pub(super) len: u64,
    pub(super) terminated: bool,
    /// Longer than the limit; its bytes were not kept.
    pub(super) oversized: bool,
}

/// Reads the next line into `buf` (newline included), keeping at most
/// `limit` bytes of it: a longer line is consumed but not stored.
pub(super) fn next_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    limit: usize,
) -> io::Result<Option<Line>> {
    buf.clear();
    let mut len = 0u64;
    let mut oversized = false;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((len > 0).then_some(Line {
                len,
                terminated: false,
                oversized,
            }));
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !oversized {
            if buf.len() + take > limit {
                oversized = true;
                buf.clear();
                buf.shrink_to(64 << 10);
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        len += take as u64;
        reader.consume(take);
        if done {
            return Ok(Some(Line {
                len,
                terminated: true,
                oversized,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_longer_than_the_limit_are_consumed_not_kept() {
        let data = format!("{}\nshort\nunterminated", "x".repeat(1000));
        let mut reader = BufReader::with_capacity(64, data.as_bytes());
        let mut buf = Vec::new();
        let first = next_line(&mut reader, &mut buf, 100).unwrap().unwrap();
        assert!(first.oversized && first.terminated);
        assert_eq!(first.len, 1001);
        assert!(buf.is_empty());
        let second = next_line(&mut reader, &mut buf, 100).unwrap().unwrap();
        assert!(!second.oversized && second.terminated);
        assert_eq!(buf, b"short\n");
        let third = next_line(&mut reader, &mut buf, 100).unwrap().unwrap();
        assert!(!third.terminated);
        assert_eq!(buf, b"unterminated");
        assert!(next_line(&mut reader, &mut buf, 100).unwrap().is_none());
    }
}
