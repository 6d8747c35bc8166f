//! JSON lists with a length cap applied while parsing: past the cap the rest of the list is
//! only counted (`IgnoredAny` allocates nothing), so a body of millions of tiny items costs
//! one pass over its bytes, not millions of parsed items, before it is refused.
//!
//! The cap is passed through a thread-local set around one synchronous `serde_json` call
//! ([`with_cap`]): the derive-based shapes stay plain structs, and no await can interleave
//! another request's parse on the same thread.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, IgnoredAny, SeqAccess, Visitor};

thread_local! {
    static CAP: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Runs `parse` with every [`Capped`] list inside it limited to `cap` elements.
pub fn with_cap<R>(cap: usize, parse: impl FnOnce() -> R) -> R {
    let old = CAP.with(|c| c.replace(cap));
    let out = parse();
    CAP.with(|c| c.set(old));
    out
}

/// A list that was within its cap, or the number of elements it had when it was not.
pub enum Capped<T> {
    Within(Vec<T>),
    Over(usize),
}

impl<T> Default for Capped<T> {
    fn default() -> Self {
        Capped::Within(Vec::new())
    }
}

struct CappedVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for CappedVisitor<T> {
    type Value = Capped<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let cap = CAP.with(Cell::get);
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(cap).min(1024));
        while out.len() < cap {
            match seq.next_element()? {
                Some(x) => out.push(x),
                None => return Ok(Capped::Within(out)),
            }
        }
        // Exactly `cap` parsed: one more element means the list is over its cap.
        if seq.next_element::<IgnoredAny>()?.is_none() {
            return Ok(Capped::Within(out));
        }
        drop(out);
        let mut n = cap.saturating_add(1);
        while seq.next_element::<IgnoredAny>()?.is_some() {
            n = n.saturating_add(1);
        }
        Ok(Capped::Over(n))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Capped<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(CappedVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str, cap: usize) -> Capped<u32> {
        with_cap(cap, || serde_json::from_str::<Capped<u32>>(json)).expect("valid json")
    }

    #[test]
    fn within_at_and_over_the_cap() {
        assert!(matches!(parse("[]", 2), Capped::Within(v) if v.is_empty()));
        assert!(matches!(parse("[1,2]", 2), Capped::Within(v) if v == [1, 2]));
        assert!(matches!(parse("[1,2,3]", 2), Capped::Over(3)));
        assert!(matches!(parse("[1,2,3,4,5]", 0), Capped::Over(5)));
        // Past the cap the rest is only counted, whatever its shape.
        assert!(matches!(
            parse(r#"[1,2,{"x":[1]},"s"]"#, 2),
            Capped::Over(4)
        ));
        // The cap does not leak out of `with_cap`.
        assert!(matches!(
            serde_json::from_str::<Capped<u32>>("[1,2,3]"),
            Ok(Capped::Within(v)) if v.len() == 3
        ));
        let bad = with_cap(5, || serde_json::from_str::<Capped<u32>>("[1,\"x\"]"));
        assert!(bad.is_err());
    }
}
