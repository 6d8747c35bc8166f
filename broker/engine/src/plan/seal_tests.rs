//! Encryption at rest in the planner: an encrypted queue's payloads enter the entry sealed and
//! read back opened; without a key such a queue is refused, never written in plain text.

use queenmq_protocol::{ErrorCode, PushStatus, Setting};

use super::fixture::{opts, Fixture};

fn encrypted(on: bool) -> queenmq_protocol::QueueOptions {
    opts(|o| o.encryption_enabled = Some(Setting::Value(on)))
}

/// A fixture holding the key, with queue `enc` encrypted and `n` messages pushed into it.
fn with_encrypted(n: usize) -> Fixture {
    let mut fx = Fixture::new();
    fx.sealed = true;
    fx.configure("enc", encrypted(true));
    fx.push("enc", "p", n);
    fx
}

fn holds(bytes: &[u8], needle: &[u8]) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn an_encrypted_queue_is_sealed_in_the_entry_and_opened_on_every_read() {
    let mut fx = with_encrypted(2);
    fx.push("plain", "p", 1);
    let entry = fx.cycle.entry.bytes().to_vec();
    // The fixture's payloads are the quoted transaction ids ("m1", "m2", "m3").
    assert!(!holds(&entry, b"\"m1\"") && !holds(&entry, b"\"m2\""));
    assert!(
        holds(&entry, b"\"m3\""),
        "the plain queue's payload is in plain text"
    );
    // Read from the entry being planned, then from the committed log after a cold cache.
    let popped = fx.pop("enc", Some("a"), 10, None);
    let data: Vec<_> = popped.messages.iter().map(|m| m.payload.clone()).collect();
    assert_eq!(data, vec![&b"\"m1\""[..], &b"\"m2\""[..]]);
    fx.commit();
    fx.cache = crate::cache::EntryCache::new(1 << 20);
    let popped = fx.pop("enc", Some("b"), 10, None);
    assert_eq!(popped.messages.len(), 2);
    assert_eq!(&popped.messages[1].payload[..], b"\"m2\"");
    fx.assert_replays();
}

#[test]
fn without_a_key_encrypted_queues_are_refused_and_stored_ones_do_not_read() {
    let mut fx = with_encrypted(1);
    fx.commit();
    fx.sealed = false;
    let e = fx
        .planner()
        .plan_configure(&queenmq_protocol::ConfigureReq {
            queue: "other".into(),
            namespace: None,
            task: None,
            options: encrypted(true),
            replace: false,
        })
        .err()
        .map(|e| e.code);
    assert_eq!(e, Some(ErrorCode::Unsupported));
    let r = fx.push("enc", "p", 1);
    assert_eq!(r[0].status, PushStatus::Failed);
    assert_eq!(
        r[0].error.as_ref().map(|e| e.code),
        Some(ErrorCode::Unsupported)
    );
    let refused = fx
        .planner()
        .plan_pop(&super::fixture::pop_req("enc", 10))
        .err()
        .map(|e| e.message);
    assert!(refused.is_some_and(|m| m.contains("no encryption_key")));
    // Turning it off needs no key; the message sealed before stays sealed.
    fx.configure("enc", encrypted(false));
}

/// Breaks the stand-in envelope of payload `"mN"` in the committed log: it no longer opens.
fn corrupt(fx: &mut Fixture, n: u32) {
    let sealed: Vec<u8> = std::iter::once(0xE5)
        .chain(format!("\"m{n}\"").bytes().map(|b| !b))
        .collect();
    let mut hit = false;
    for bytes in fx.log.entries.values_mut() {
        if let Some(at) = bytes.windows(sealed.len()).position(|w| w == sealed) {
            bytes[at] = 0;
            hit = true;
        }
    }
    assert!(hit, "the envelope of m{n} is in the log");
    fx.cache = crate::cache::EntryCache::new(1 << 20);
}

#[test]
fn a_repeated_transaction_id_is_a_duplicate_without_opening_the_stored_payload() {
    let mut fx = with_encrypted(1);
    let first = fx
        .planner()
        .plan_push(&[super::fixture::item("enc", "p", "m1")], None);
    assert_eq!(first.unwrap()[0].status, PushStatus::Duplicate);
    fx.commit();
    corrupt(&mut fx, 1);
    let again = fx
        .planner()
        .plan_push(&[super::fixture::item("enc", "p", "m1")], None)
        .expect("a payload that does not open has no bearing on dedup");
    assert_eq!(
        (again[0].status, again[0].offset),
        (PushStatus::Duplicate, 0)
    );
}

#[test]
fn a_payload_that_does_not_open_fails_only_itself() {
    use queenmq_protocol::fetch::{FetchEntry, FetchError, FetchReq};
    let mut fx = with_encrypted(3);
    fx.push("plain", "p", 1);
    fx.commit();
    corrupt(&mut fx, 2);
    // A pop gets the message before the damaged one; the next pop fails at it.
    let popped = fx.pop("enc", Some("a"), 10, None);
    let got: Vec<u64> = popped.messages.iter().map(|m| m.offset).collect();
    assert_eq!(got, vec![0]);
    // A fetch of both queues answers the plain one and marks only the damaged entry.
    let entry = |queue: &str, offset| FetchEntry {
        queue: queue.into(),
        partition: "p".into(),
        offset,
        max_bytes: 1 << 20,
    };
    let req = FetchReq {
        entries: vec![entry("enc", 1), entry("plain", 0), entry("enc", 0)],
        max_bytes: 1 << 20,
        read_committed: false,
    };
    let mut rd = crate::reader::MessageReader {
        pending: &[],
        cache: &mut fx.cache,
        log: &fx.log,
        seal: Some(&crate::seal::TestSeal),
    };
    let a = crate::reads::fetch::fetch(&fx.st, &mut rd, &req, true).expect("answered per entry");
    assert_eq!(a.entries[0].error, Some(FetchError::Corrupt));
    assert_eq!(a.entries[1].error, None);
    assert_eq!(&a.entries[1].records[0].payload[..], b"\"m4\"");
    assert_eq!(
        a.entries[2].records.len(),
        1,
        "the record before it is served"
    );
}
