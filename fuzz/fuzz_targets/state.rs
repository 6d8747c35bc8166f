#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    queenmq_engine::fuzzing::state(data);
});
