//! What the heap holds while the door decodes a ListTransactions and encodes a
//! DescribeProducers answer (review s17 lead H1, L3), with the shared counting allocator
//! (one process per test binary; the two measurements take turns).

#[path = "../../broker/engine/tests/support/counting_alloc.rs"]
mod counting_alloc;

use std::sync::atomic::Ordering;
use std::sync::Mutex;

use bytes::{BufMut, BytesMut};
use counting_alloc::{HELD, PEAK};
use queenmq_kafka_port::txn::producers_answer::{self, Slot, Topics};
use queenmq_kafka_port::txn::reads;
use queenmq_kafka_port::wire::Reader;
use queenmq_protocol::kafka_txn_reads::ProducerView;

static TURN: Mutex<()> = Mutex::new(());

/// The heap's peak above what it held when `f` began.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = HELD.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let out = f();
    (out, PEAK.load(Ordering::SeqCst) - before)
}

/// Review s17 lead L3: a frame declaring 90 000 producer ids (fewer than its bytes, so the
/// count passes the length check) and carrying about 12 500 made room for all 90 000 (720 KB)
/// before reading the first (review s18 kafka M3: with 100 000 declared the count was refused
/// first and the test could not fail).
#[test]
fn a_declared_count_the_frame_does_not_carry_costs_at_most_the_frame() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    const FRAME: usize = 100_000;
    let mut buf = BytesMut::with_capacity(FRAME);
    buf.put_u8(1); // no state filters (compact: length + 1)
                   // 90 001 as an unsigned varint: 90 000 ids declared.
    let mut n: u32 = 90_001;
    while n >= 0x80 {
        buf.put_u8((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    buf.put_u8(n as u8);
    buf.resize(FRAME, 0xff);
    let frame = buf.freeze();
    let (got, peak) = peak_of(|| reads::decode_list(&mut Reader::new(frame.clone(), true)));
    assert!(got.is_err(), "the ids are not there");
    assert!(peak <= 2 * FRAME, "decoding peaked at {peak} bytes");
}

/// Review s17 lead H1: a DescribeProducers answer of 500 partitions of 1000 producers was
/// held about five times over (a ProducerState each, a buffer grown by doubling, a copy
/// behind the header). Encoded from the engine's views into a buffer of its size, the door
/// adds the frame and little else.
#[test]
fn a_large_producers_answer_is_encoded_at_about_its_frames_size() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let view = |i: i64| ProducerView {
        producer_id: i,
        epoch: 1,
        last_sequence: 5,
        last_ms: 1_700_000_000_000,
        txn_start_offset: -1,
    };
    // The engine's answer, as the door receives it.
    let topics: Topics = vec![(
        "topic".to_string(),
        (0..500)
            .map(|p| (p, Slot::Listed((0..1_000).map(view).collect())))
            .collect(),
    )];
    let frame = producers_answer::encoded_len(&topics);
    assert!(reads::producers_held(&topics) >= frame);
    let (body, peak) = peak_of(|| producers_answer::encode(topics));
    assert_eq!(body.len(), frame);
    assert!(
        peak * 2 <= frame * 5,
        "encoding peaked at {peak} bytes for a {frame}-byte answer"
    );
}
