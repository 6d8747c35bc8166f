#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    queenmq_protocol::binary::fuzzing::push_body(data);
});
