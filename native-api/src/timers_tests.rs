//! The door's parse of timer ops: the list cap applies while parsing, each op alone.

use queenmq_protocol::{TimerOp, MAX_TIMER_OPS, MAX_TIMER_PAYLOAD_BYTES};

use super::parse_ops;

fn cancel(i: usize) -> String {
    format!(r#"{{"op":"cancel","queue":"q","timerKey":"k{i}"}}"#)
}

#[test]
fn a_list_past_the_cap_is_refused_with_its_count() {
    let ops: Vec<String> = (0..MAX_TIMER_OPS + 5).map(cancel).collect();
    let body = format!(r#"{{"operations":[{}]}}"#, ops.join(","));
    let e = parse_ops(body.as_bytes()).expect_err("refused");
    assert_eq!(e.reason, "timers_too_many_ops");
    assert!(e.detail.starts_with(&format!("{} ", MAX_TIMER_OPS + 5)));
}

#[test]
fn an_object_or_a_bare_array_parses_and_anything_else_is_refused() {
    let one = format!("[{}]", cancel(1));
    let obj = format!(r#"  {{"operations":{one}}}"#);
    for body in [one.as_str(), obj.as_str()] {
        let Ok(ops) = parse_ops(body.as_bytes()) else {
            panic!("{body:?} was refused")
        };
        assert!(matches!(&ops[..], [TimerOp::Cancel { key, .. }] if key == "k1"));
    }
    for body in [
        "",
        "3",
        "{\"operations\":3}",
        "[1]",
        "[{\"op\":\"cancel\"",
        "{}",
    ] {
        assert!(parse_ops(body.as_bytes()).is_err(), "{body:?} was taken");
    }
}

#[test]
fn every_tenant_field_is_server_owned() {
    for f in ["tenant", "tenantId", "tenantName", "Tenant_x", "TENANTS"] {
        let body = format!(r#"[{{"op":"cancel","queue":"q","timerKey":"k","{f}":"other"}}]"#);
        let e = parse_ops(body.as_bytes()).err();
        assert_eq!(
            e.map(|e| e.reason),
            Some("timers_server_owned_field"),
            "{f}"
        );
    }
}

#[test]
fn a_zstd_payload_keeps_only_its_length_and_a_bomb_is_refused() {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let small = zstd::bulk::compress(b"{\"a\":1}", 3).expect("compresses");
    let Ok(p) = super::decode_payload(&b64(&small), true) else {
        panic!("refused")
    };
    assert_eq!(&p[..], b"{\"a\":1}");
    // A Bytes made from a Vec with spare room keeps it; a copy is exact. Checked on the
    // helper whose output the op keeps.
    let raw = super::zstd_bounded(&small).expect("decodes");
    assert!(raw.capacity() < 1 << 10, "took {} bytes", raw.capacity());
    let bomb =
        zstd::bulk::compress(&vec![b'a'; MAX_TIMER_PAYLOAD_BYTES + 1], 3).expect("compresses");
    let e = super::decode_payload(&b64(&bomb), true).err();
    assert_eq!(e.map(|e| e.reason), Some("timers_payload_too_large"));
}

#[test]
fn a_full_disk_is_507_with_retry_after_in_the_timer_and_kv_shapes() {
    use axum::response::IntoResponse;
    use queenmq_protocol::{ErrorCode, QueenError};
    let full = || QueenError::new(ErrorCode::StorageFull, "disk");
    let timers = super::TimerError::from(full());
    assert_eq!(timers.reason, "storage_full");
    let resp = timers.into_response();
    assert_eq!(resp.status(), axum::http::StatusCode::INSUFFICIENT_STORAGE);
    assert!(resp.headers().contains_key("retry-after"));
    let kv = crate::kv::KvApiError::from(crate::error::ApiError(full()));
    assert_eq!((kv.error, kv.reason), ("kv_storage_full", "storage_full"));
    let resp = kv.into_response();
    assert_eq!(resp.status(), axum::http::StatusCode::INSUFFICIENT_STORAGE);
    assert!(resp.headers().contains_key("retry-after"));
}
