//! Fuzz target: arbitrary bytes through the upstream SSE decoder. Cutting the body anywhere (at
//! the first byte's value) or feeding it a byte at a time must give the same events (or the same
//! error) as the whole body, and the decoder must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use responses_relay::upstream::sse::SseDecoder;

fn decode(chunks: &[&[u8]]) -> Result<Vec<String>, ()> {
    let mut d = SseDecoder::new();
    let mut out = Vec::new();
    for c in chunks {
        d.push(c);
        while let Some(data) = d.next_data() {
            out.push(data.map_err(|_| ())?.to_string());
        }
    }
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, body)) = data.split_first() else { return };
    let whole = decode(&[body]);
    let at = (cut as usize) % (body.len() + 1);
    assert_eq!(decode(&[&body[..at], &body[at..]]), whole, "cut at {at}");
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(decode(&bytes), whole, "one byte at a time");
});
