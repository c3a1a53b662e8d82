//! A server-sent events parser (the WHATWG `text/event-stream` format),
//! sans-IO: feed it bytes split anywhere, get complete events.
//!
//! Lines are split at the byte level (`\n`, `\r\n` or `\r`) before any
//! UTF-8 decoding, so a character split across network chunks is never
//! seen half; a line that is not valid UTF-8 is an error, not a silent
//! stall. Lines and events are bounded in size.

use std::fmt;

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; empty means the default `message`.
    pub event: String,
    /// The `data:` fields joined with `\n`.
    pub data: String,
}

/// Why a stream could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// A line was not valid UTF-8.
    InvalidUtf8 {
        /// The 1-based line number.
        line: usize,
    },
    /// A line or an event grew past the limit.
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::InvalidUtf8 { line } => write!(f, "line {line} of the event stream is not valid UTF-8"),
            SseError::TooLarge { limit } => write!(f, "an event stream line or event exceeds {limit} bytes"),
        }
    }
}

/// The largest line or event accepted (model events are far smaller).
pub(crate) const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Splits a byte stream into lines, at the byte level.
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    buffer: Vec<u8>,
    /// The previous chunk ended with `\r`; a leading `\n` belongs to it.
    after_cr: bool,
    limit: usize,
}

impl LineSplitter {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// Complete lines (without their terminators) found in `chunk`.
    pub(crate) fn push(&mut self, chunk: &[u8], lines: &mut Vec<Vec<u8>>) -> Result<(), usize> {
        let mut bytes = chunk;
        if self.after_cr && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        self.after_cr = false;
        let mut start = 0;
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' | b'\r' => {
                    self.buffer.extend_from_slice(&bytes[start..i]);
                    lines.push(std::mem::take(&mut self.buffer));
                    if bytes[i] == b'\r' {
                        if i + 1 == bytes.len() {
                            self.after_cr = true;
                        } else if bytes[i + 1] == b'\n' {
                            i += 1;
                        }
                    }
                    start = i + 1;
                }
                _ => {}
            }
            i += 1;
        }
        self.buffer.extend_from_slice(&bytes[start..]);
        if self.buffer.len() > self.limit {
            return Err(self.limit);
        }
        Ok(())
    }

    /// The unterminated rest, if any.
    pub(crate) fn rest(&mut self) -> Option<Vec<u8>> {
        (!self.buffer.is_empty()).then(|| std::mem::take(&mut self.buffer))
    }
}

/// The event-stream parser.
#[derive(Debug)]
pub struct SseParser {
    lines: LineSplitter,
    line_no: usize,
    event: String,
    data: String,
    has_data: bool,
    started: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with the default size limit.
    pub fn new() -> Self {
        Self {
            lines: LineSplitter::new(MAX_EVENT_BYTES),
            line_no: 0,
            event: String::new(),
            data: String::new(),
            has_data: false,
            started: false,
        }
    }

    /// Feeds bytes; returns the events completed by them, in order. An
    /// error comes after the events that preceded it and ends the list; the
    /// stream is unusable after it.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Result<SseEvent, SseError>> {
        let mut lines = Vec::new();
        let overflow = self.lines.push(chunk, &mut lines).err();
        let mut events = Vec::new();
        for line in lines {
            match self.line(line) {
                Ok(Some(event)) => events.push(Ok(event)),
                Ok(None) => {}
                Err(e) => {
                    events.push(Err(e));
                    return events;
                }
            }
        }
        if let Some(limit) = overflow {
            events.push(Err(SseError::TooLarge { limit }));
        }
        events
    }

    /// Whether bytes of an unfinished event are pending (a stream that ends
    /// now was cut off mid-event).
    pub fn is_mid_event(&self) -> bool {
        self.has_data || !self.event.is_empty() || !self.lines.buffer.is_empty()
    }

    /// Ends the stream: an unterminated last event is *not* dispatched (as
    /// the format requires); returns whether one was pending.
    pub fn finish(&mut self) -> bool {
        let pending = self.is_mid_event();
        self.lines.rest();
        self.event.clear();
        self.data.clear();
        self.has_data = false;
        pending
    }

    fn line(&mut self, raw: Vec<u8>) -> Result<Option<SseEvent>, SseError> {
        self.line_no += 1;
        let mut line = String::from_utf8(raw).map_err(|_| SseError::InvalidUtf8 { line: self.line_no })?;
        if !self.started {
            self.started = true;
            if let Some(rest) = line.strip_prefix('\u{feff}') {
                line = rest.to_owned();
            }
        }
        if line.is_empty() {
            if !self.has_data {
                self.event.clear();
                return Ok(None);
            }
            let event = SseEvent {
                event: std::mem::take(&mut self.event),
                data: std::mem::take(&mut self.data),
            };
            self.has_data = false;
            return Ok(Some(event));
        }
        if line.starts_with(':') {
            return Ok(None); // a comment (keep-alive)
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line.as_str(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
                if self.data.len() > MAX_EVENT_BYTES {
                    return Err(SseError::TooLarge {
                        limit: MAX_EVENT_BYTES,
                    });
                }
            }
            "event" => self.event = value.to_owned(),
            _ => {} // id, retry and unknown fields do not matter here
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        chunks
            .iter()
            .flat_map(|c| p.push(c))
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn events_comments_and_multiline_data() {
        let events = parse_all(&[b": ping\n\nevent: a\ndata: one\ndata:two\n\ndata: x\r\n\r\n"]);
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: "a".into(),
                    data: "one\ntwo".into()
                },
                SseEvent {
                    event: String::new(),
                    data: "x".into()
                }
            ]
        );
    }

    #[test]
    fn a_split_character_and_a_split_crlf_are_joined() {
        let text = "data: 가\r\n\r\n".as_bytes();
        let events = parse_all(&[&text[..7], &text[7..9], &text[9..10], &text[10..]]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "가");
    }

    #[test]
    fn invalid_utf8_is_an_error_with_the_line_number() {
        let mut p = SseParser::new();
        let out = p.push(b"data: ok\n\ndata: \xff\xfe\n");
        assert_eq!(out.len(), 2, "the event before the bad line is kept");
        assert_eq!(out[1], Err(SseError::InvalidUtf8 { line: 3 }));
    }

    #[test]
    fn an_unterminated_event_is_reported_not_dispatched() {
        let mut p = SseParser::new();
        assert!(p.push(b"data: {\"half\":").is_empty());
        assert!(p.is_mid_event());
        assert!(p.finish());
        let mut q = SseParser::new();
        assert_eq!(q.push(b"data: done\n\n").len(), 1);
        assert!(!q.finish());
    }

    #[test]
    fn oversized_lines_are_refused() {
        let mut p = SseParser::new();
        let big = vec![b'a'; MAX_EVENT_BYTES + 1];
        let limit = MAX_EVENT_BYTES;
        assert_eq!(p.push(&big), vec![Err(SseError::TooLarge { limit })]);
    }
}
