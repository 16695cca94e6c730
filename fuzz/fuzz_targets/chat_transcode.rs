//! Fuzz target: arbitrary Chat Completions chunk payloads (one per line, an empty line between
//! model turns) through `ChunkParser`, the transcoder and the emitter, as the agent loop runs them;
//! the run's event log must stay well-ordered (see `relay_fuzz::check_log`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let turns = relay_fuzz::turns_of_lines(data);
    relay_fuzz::drive(turns.iter().map(|lines| relay_fuzz::chat_turn(lines)));
});
