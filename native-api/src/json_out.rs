//! Writing JSON answers straight into one buffer: the hot answers (push results, popped
//! messages) are built per message, so they avoid `serde_json::Value` trees and per-field
//! `String`s.

use std::fmt::Write;

use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Appends `s` as a JSON string literal.
pub fn str_lit(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0..=0x1f => None,
            _ => continue,
        };
        // Every byte matched above is ASCII, so slicing at `i` stays on a char boundary.
        out.push_str(&s[start..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => {
                let _ = write!(out, "\\u{:04x}", b);
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Appends `"key":` (keys here are fixed ASCII identifiers).
pub fn key(out: &mut String, k: &str) {
    out.push('"');
    out.push_str(k);
    out.push_str("\":");
}

pub fn opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => str_lit(out, s),
        None => out.push_str("null"),
    }
}

pub fn num(out: &mut String, n: impl std::fmt::Display) {
    let _ = write!(out, "{n}");
}

/// A finished JSON text as an HTTP answer.
pub fn response(status: StatusCode, body: String) -> Response {
    (status, [(CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_literals_round_trip_through_serde_json() {
        for s in [
            "",
            "plain",
            "quote \" and \\ back",
            "ctl \u{1} \u{1f} \n\r\t",
            "ünïcödé ✓",
        ] {
            let mut out = String::new();
            str_lit(&mut out, s);
            let back: String = serde_json::from_str(&out).unwrap();
            assert_eq!(back, s, "{out}");
        }
    }
}
