#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    queenmq_protocol::binary::fuzzing::pop_frames_check(data);
});
