#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    queenmq_storage::fuzzing::snapshot_stream(data);
});
