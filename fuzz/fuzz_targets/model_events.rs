//! Fuzz target: arbitrary sequences of model events (text, refusal, reasoning, tool-call
//! fragments with any index, name and order, usage, finish reasons, errors; the binary encoding of
//! `relay_fuzz::decode_ops`) straight into the transcoder and the emitter, over several turns;
//! the run's event log must stay well-ordered (see `relay_fuzz::check_log`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    relay_fuzz::drive(relay_fuzz::decode_ops(data));
});
