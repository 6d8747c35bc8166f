#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    queenmq_kafka_port::fuzzing::request(data);
});
