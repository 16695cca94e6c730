//! A Server-Sent Events decoder for upstream answers: bytes in, the `data` of each event out.
//!
//! Follows the HTML event-stream grammar: an optional byte-order mark, lines ending in CRLF, LF or
//! CR, `:` comments, `field[: value]` lines, an empty line dispatching the event whose data lines
//! are joined with LF; an event without `data` is not dispatched, and an unfinished event at the end
//! of the body is dropped. Only `data` matters to the relay (`event`, `id` and `retry` are read and
//! ignored). Works on bytes in one buffer, consumed once: no per-line copies of what follows, and
//! each event's data is lent to the caller until it asks for the next (no copy per event).

/// The decoder's state between chunks.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes not yet split into lines.
    buf: Vec<u8>,
    /// How far `buf` has been consumed.
    pos: usize,
    /// How far past `pos` `buf` is known to hold no line end (a long line arriving in pieces is
    /// searched once).
    scanned: usize,
    /// The current event's data lines, each followed by LF.
    data: Vec<u8>,
    has_data: bool,
    /// Whether `data` was handed out by the last [`SseDecoder::next_data`] (cleared on the next).
    handed: bool,
    /// Whether the stream's first bytes (a possible byte-order mark) were seen.
    started: bool,
}

/// Data that is not UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the event stream's data is not valid UTF-8")]
pub struct InvalidUtf8;

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next chunk of the body; [`SseDecoder::next_data`] then hands out the events it
    /// completes.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.pos > 0 && self.pos * 2 >= self.buf.len() {
            // Keep the buffer small: drop what was consumed once it is at least half of it.
            self.buf.drain(..self.pos);
            self.scanned = self.scanned.saturating_sub(self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(chunk);
        if !self.started {
            if self.buf.len() < BOM.len() && BOM.starts_with(&self.buf) {
                return; // Maybe the start of a byte-order mark: wait for more.
            }
            self.started = true;
            if self.buf.starts_with(BOM) {
                self.pos = BOM.len();
            }
        }
    }

    /// The data of the next event the bytes pushed so far complete, borrowed until the next
    /// call (no copy per event); `None` once more bytes are needed.
    pub fn next_data(&mut self) -> Option<Result<&str, InvalidUtf8>> {
        if std::mem::take(&mut self.handed) {
            self.data.clear();
        }
        if !self.started {
            return None;
        }
        let mut from = self.scanned.max(self.pos);
        while let Some(end) = self.buf[from..]
            .iter()
            .position(|b| *b == b'\n' || *b == b'\r')
        {
            let line_end = from + end;
            let next = match self.buf[line_end] {
                b'\r' => match self.buf.get(line_end + 1) {
                    Some(b'\n') => line_end + 2,
                    Some(_) => line_end + 1,
                    None => {
                        // A CR that ends the buffer may be the first half of CRLF: wait for more.
                        self.scanned = line_end;
                        return None;
                    }
                },
                _ => line_end + 1,
            };
            let start = self.pos;
            self.pos = next;
            from = next;
            if self.line(start, line_end) {
                self.handed = true;
                self.data.pop(); // The LF after the last data line.
                return Some(std::str::from_utf8(&self.data).map_err(|_| InvalidUtf8));
            }
        }
        self.scanned = self.buf.len();
        None
    }

    /// Handles the line `buf[start..end]`: whether it dispatches an event.
    fn line(&mut self, start: usize, end: usize) -> bool {
        let line = &self.buf[start..end];
        if line.is_empty() {
            return std::mem::take(&mut self.has_data);
        }
        if line[0] == b':' {
            return false;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &line[line.len()..]),
        };
        if field == b"data" {
            self.data.extend_from_slice(value);
            self.data.push(b'\n');
            self.has_data = true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes each chunk and takes every event it completes.
    fn drain(d: &mut SseDecoder, chunk: &[u8], out: &mut Vec<String>) -> Result<(), InvalidUtf8> {
        d.push(chunk);
        while let Some(data) = d.next_data() {
            out.push(data?.to_string());
        }
        Ok(())
    }

    fn decode_in(chunks: &[&[u8]]) -> Result<Vec<String>, InvalidUtf8> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            drain(&mut d, c, &mut out)?;
        }
        Ok(out)
    }

    /// Every way of cutting `body` in two gives the same events as the whole body.
    fn same_at_every_split(body: &[u8]) -> Vec<String> {
        let whole = decode_in(&[body]).expect("valid");
        for i in 0..=body.len() {
            assert_eq!(
                decode_in(&[&body[..i], &body[i..]]).expect("valid"),
                whole,
                "split at {i}"
            );
        }
        let bytewise: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(
            decode_in(&bytewise).expect("valid"),
            whole,
            "one byte at a time"
        );
        whole
    }

    #[test]
    fn data_lines_are_joined_and_events_end_at_a_blank_line() {
        let out =
            same_at_every_split(b"data: {\"a\":1}\n\ndata: one\ndata:two\n\ndata: [DONE]\n\n");
        assert_eq!(out, vec!["{\"a\":1}", "one\ntwo", "[DONE]"]);
    }

    #[test]
    fn crlf_and_cr_line_endings_are_lines_too() {
        let out = same_at_every_split(b"data: a\r\n\r\ndata: b\r\rdata: c\r\n\n");
        assert_eq!(out, vec!["a", "b", "c"]);
    }

    #[test]
    fn comments_other_fields_and_events_without_data_are_not_dispatched() {
        let out = same_at_every_split(
            b": keepalive\n\nevent: response.created\nid: 7\nretry: 10\ndata: x\n\nevent: ping\n\ndata\n\n",
        );
        // `data` with no colon is a data line with an empty value: an event whose data is "".
        assert_eq!(out, vec!["x", ""]);
    }

    #[test]
    fn only_one_space_after_the_colon_is_removed() {
        assert_eq!(
            same_at_every_split(b"data:  two spaces\n\n"),
            vec![" two spaces"]
        );
    }

    #[test]
    fn a_byte_order_mark_at_the_start_is_skipped() {
        assert_eq!(same_at_every_split(b"\xEF\xBB\xBFdata: a\n\n"), vec!["a"]);
        // Only at the start: later it is part of the line (here a field name, so ignored).
        assert_eq!(
            same_at_every_split(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"),
            vec!["a"]
        );
    }

    #[test]
    fn an_unfinished_event_at_the_end_is_not_dispatched() {
        assert_eq!(same_at_every_split(b"data: a\n\ndata: b\n"), vec!["a"]);
        assert_eq!(same_at_every_split(b"data: a\n\ndata: b"), vec!["a"]);
    }

    #[test]
    fn multibyte_characters_split_across_chunks_survive() {
        assert_eq!(
            same_at_every_split("data: héllo ✓\n\n".as_bytes()),
            vec!["héllo ✓"]
        );
    }

    #[test]
    fn data_that_is_not_utf8_is_an_error() {
        assert_eq!(decode_in(&[b"data: \xFF\xFE\n\n"]), Err(InvalidUtf8));
    }

    #[test]
    fn consumed_bytes_are_released_as_the_stream_goes_on() {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for i in 0..10_000 {
            drain(&mut d, format!("data: {i}\n\n").as_bytes(), &mut out).expect("valid");
        }
        assert_eq!(out.len(), 10_000);
        assert_eq!(out[9_999], "9999");
        assert!(
            d.buf.capacity() < 4096,
            "buffer grew to {}",
            d.buf.capacity()
        );
    }
}
