//! Newline-delimited JSON framing (Ollama's stream), sans-IO: bytes split
//! anywhere in, complete JSON values out.

use serde_json::Value;

use super::sse::{LineSplitter, MAX_EVENT_BYTES};

/// Why a line could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NdjsonError {
    /// A line was not valid UTF-8 or not valid JSON.
    Invalid {
        /// The 1-based line number.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// A line grew past the limit.
    TooLarge,
}

impl std::fmt::Display for NdjsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NdjsonError::Invalid { line, message } => write!(f, "line {line} is not a JSON value: {message}"),
            NdjsonError::TooLarge => write!(f, "a line exceeds {MAX_EVENT_BYTES} bytes"),
        }
    }
}

/// The NDJSON parser.
#[derive(Debug)]
pub struct NdjsonParser {
    lines: LineSplitter,
    line_no: usize,
}

impl Default for NdjsonParser {
    fn default() -> Self {
        Self {
            lines: LineSplitter::new(MAX_EVENT_BYTES),
            line_no: 0,
        }
    }
}

impl NdjsonParser {
    /// Feeds bytes; returns the values completed by them, in order. Blank
    /// lines are skipped. An error comes after the values that preceded it
    /// and ends the list.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Result<Value, NdjsonError>> {
        let mut lines = Vec::new();
        let overflow = self.lines.push(chunk, &mut lines).is_err();
        let mut values = Vec::new();
        for line in lines {
            match self.parse(line) {
                Ok(Some(v)) => values.push(Ok(v)),
                Ok(None) => {}
                Err(e) => {
                    values.push(Err(e));
                    return values;
                }
            }
        }
        if overflow {
            values.push(Err(NdjsonError::TooLarge));
        }
        values
    }

    /// Ends the stream; a last line without a newline is parsed too.
    pub fn finish(&mut self) -> Result<Vec<Value>, NdjsonError> {
        match self.lines.rest() {
            Some(rest) => self.parse(rest).map(|v| v.into_iter().collect()),
            None => Ok(Vec::new()),
        }
    }

    fn parse(&mut self, raw: Vec<u8>) -> Result<Option<Value>, NdjsonError> {
        self.line_no += 1;
        if raw.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        serde_json::from_slice(&raw)
            .map(Some)
            .map_err(|e| NdjsonError::Invalid {
                line: self.line_no,
                message: e.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_across_chunks_and_a_trailing_line() {
        let mut p = NdjsonParser::default();
        let bytes = "{\"a\":\"가\"}\n\n{\"b\":2}".as_bytes();
        let mut out: Vec<Value> = p.push(&bytes[..8]).into_iter().map(Result::unwrap).collect();
        out.extend(p.push(&bytes[8..]).into_iter().map(Result::unwrap));
        out.extend(p.finish().unwrap());
        assert_eq!(out, vec![json!({"a": "가"}), json!({"b": 2})]);
    }

    #[test]
    fn garbage_is_an_error_naming_the_line() {
        let mut p = NdjsonParser::default();
        let out = p.push(b"{\"ok\":1}\nnot json\n{\"x\":2}\n");
        assert_eq!(
            out.len(),
            2,
            "the value before the bad line is kept, nothing after it"
        );
        assert!(
            matches!(&out[1], Err(NdjsonError::Invalid { line: 2, .. })),
            "{out:?}"
        );
    }
}
