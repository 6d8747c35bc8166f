#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    queenmq_protocol::binary::fuzzing::txn_body_check(data);
});
