//! The door's parse of timer ops: the list cap applies while parsing, each op alone.

use queenmq_protocol::{TimerOp, MAX_TIMER_OPS};

use super::parse_ops;

fn cancel(i: usize) -> String {
    format!(r#"{{"op":"cancel","queue":"q","timerKey":"k{i}"}}"#)
}

#[test]
fn a_list_past_the_cap_is_refused_with_its_count() {
    let ops: Vec<String> = (0..MAX_TIMER_OPS + 5).map(cancel).collect();
    let body = format!(r#"{{"operations":[{}]}}"#, ops.join(","));
    let e = parse_ops(body.as_bytes()).err().expect("refused");
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
