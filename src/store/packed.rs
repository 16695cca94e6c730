//! A finished run packed into one compressed blob, as the SQLite backend keeps it: its event log
//! and its final Response. The blob is a version byte, the packed length (LEB128), then one zstd
//! frame of: the number of entries, every entry in order (its `offset_ms` and frame length, LEB128,
//! then its SSE frame as streamed), and last the Response's JSON. Sequence numbers are not
//! written: a log's entries are numbered 0, 1, 2... (the emitter's invariant), so an entry's seq is
//! its place. The Response repeats the terminal event's, so in one frame it costs zstd a few
//! bytes. Unpacking slices every frame out of one buffer, so a replay sends the bytes the live
//! clients got without copying them again. A live run's events of one SQLite batch are journaled
//! in the same format with no Response (`pack_part`), numbered from the row's first `seq`.

use bytes::Bytes;

use super::StoreError;
use crate::eventlog::log::LogEntry;

/// The first byte of a packed log in this format.
const VERSION: u8 = 1;
/// Largest packed (uncompressed) log accepted back, against a corrupt length.
const MAX_PACKED: u64 = 1 << 31;

/// zstd level. Measured on 300 short runs' streams (20 deltas, 8,972 bytes each): level 1 packs
/// one to 1,075 bytes, level 3 to 1,074, level 9 to 995; 1 costs the least CPU.
pub const LEVEL: i32 = 1;

/// Compresses logs, reusing one zstd context (the SQLite writer holds one).
pub struct Packer {
    zstd: zstd::bulk::Compressor<'static>,
    raw: Vec<u8>,
}

impl Packer {
    pub fn new() -> Result<Self, StoreError> {
        Ok(Packer {
            zstd: zstd::bulk::Compressor::new(LEVEL)
                .map_err(|e| StoreError::Internal(format!("zstd: {e}")))?,
            raw: Vec::new(),
        })
    }

    /// `entries` (numbered from 0, in order) and the run's final `response` JSON as one blob.
    pub fn pack(&mut self, entries: &[LogEntry], response: &[u8]) -> Result<Vec<u8>, StoreError> {
        debug_assert!(
            entries.iter().enumerate().all(|(i, e)| e.seq == i as u64),
            "a log is numbered from 0 without gaps"
        );
        self.pack_entries(entries.iter(), response)
    }

    /// Consecutive entries of a live run, without a Response, as one blob of the same format
    /// (the SQLite journal's row for one run's events of one batch). [`unpack`] numbers them
    /// from 0: the reader adds the first one's `seq`, which the row keeps.
    pub fn pack_part<'a>(
        &mut self,
        entries: impl ExactSizeIterator<Item = &'a LogEntry>,
    ) -> Result<Vec<u8>, StoreError> {
        self.pack_entries(entries, b"")
    }

    fn pack_entries<'a>(
        &mut self,
        entries: impl ExactSizeIterator<Item = &'a LogEntry>,
        response: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        self.raw.clear();
        put_varint(&mut self.raw, entries.len() as u64);
        for e in entries {
            put_varint(&mut self.raw, e.offset_ms);
            put_varint(&mut self.raw, e.frame.len() as u64);
            self.raw.extend_from_slice(&e.frame);
        }
        self.raw.extend_from_slice(response);
        let mut blob = Vec::with_capacity(self.raw.len() / 4 + 16);
        blob.push(VERSION);
        put_varint(&mut blob, self.raw.len() as u64);
        let packed = self
            .zstd
            .compress(&self.raw)
            .map_err(|e| StoreError::Internal(format!("zstd: {e}")))?;
        blob.extend_from_slice(&packed);
        Ok(blob)
    }
}

/// What [`Packer::pack`] packed.
pub struct Unpacked {
    pub entries: Vec<LogEntry>,
    /// The final Response's JSON.
    pub response: Bytes,
}

/// The entries and Response of a blob made by [`Packer::pack`].
pub fn unpack(blob: &[u8]) -> Result<Unpacked, StoreError> {
    let bad = |why: &str| StoreError::Corrupt(format!("a kept log is unreadable: {why}"));
    let (&version, mut rest) = blob.split_first().ok_or_else(|| bad("empty"))?;
    if version != VERSION {
        return Err(bad(&format!("unknown format {version}")));
    }
    let len = take_varint(&mut rest).ok_or_else(|| bad("no length"))?;
    if len > MAX_PACKED {
        return Err(bad("too long"));
    }
    let raw = zstd::bulk::decompress(rest, len as usize).map_err(|e| bad(&e.to_string()))?;
    if raw.len() as u64 != len {
        return Err(bad("short"));
    }
    let raw = Bytes::from(raw);
    let mut at: &[u8] = &raw;
    let count = take_varint(&mut at).ok_or_else(|| bad("no entry count"))?;
    let mut entries = Vec::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        let offset_ms = take_varint(&mut at).ok_or_else(|| bad("truncated entry"))?;
        let n = take_varint(&mut at).ok_or_else(|| bad("truncated entry"))? as usize;
        if n > at.len() {
            return Err(bad("truncated frame"));
        }
        let start = raw.len() - at.len();
        entries.push(LogEntry {
            seq: entries.len() as u64,
            offset_ms,
            frame: raw.slice(start..start + n),
        });
        at = &at[n..];
    }
    let response = raw.slice(raw.len() - at.len()..);
    Ok(Unpacked { entries, response })
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn take_varint(input: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for (i, b) in input.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *input = &input[i + 1..];
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, offset_ms: u64, kind: &str, json: &str) -> LogEntry {
        LogEntry {
            seq,
            offset_ms,
            frame: LogEntry::frame_for(kind, json.as_bytes()),
        }
    }

    #[test]
    fn a_packed_log_unpacks_to_the_same_frames_offsets_and_numbers() {
        let log: Vec<LogEntry> = (0..300)
            .map(|i| {
                entry(
                    i,
                    i * 1000,
                    "response.output_text.delta",
                    &format!(r#"{{"type":"response.output_text.delta","delta":"w{i} ü","sequence_number":{i}}}"#),
                )
            })
            .collect();
        let blob = Packer::new().unwrap().pack(&log, br#"{"id":"r"}"#).unwrap();
        let raw: usize = log.iter().map(|e| e.frame.len()).sum();
        assert!(blob.len() < raw / 4, "{} of {raw} bytes", blob.len());
        let back = unpack(&blob).unwrap();
        assert_eq!(&back.response[..], br#"{"id":"r"}"#);
        assert_eq!(back.entries.len(), log.len());
        for (a, b) in back.entries.iter().zip(&log) {
            assert_eq!(
                (a.seq, a.offset_ms, &a.frame),
                (b.seq, b.offset_ms, &b.frame)
            );
        }
    }

    #[test]
    fn a_damaged_blob_is_an_error_not_a_wrong_log() {
        let log = [entry(
            0,
            0,
            "response.created",
            r#"{"type":"response.created"}"#,
        )];
        let blob = Packer::new().unwrap().pack(&log, b"{}").unwrap();
        assert!(unpack(&blob[..blob.len() - 3]).is_err());
        assert!(unpack(&[]).is_err());
        let mut other = blob.clone();
        other[0] = 9;
        assert!(unpack(&other).is_err());
    }
}
