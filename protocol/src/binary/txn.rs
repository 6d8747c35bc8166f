//! The QTB1 transaction body: `"QTB1" | u8 flags | u32 head_len | head | u32 groups | groups`,
//! the groups as QPB1 flag-8 groups. The head is the JSON transaction body without its push
//! operations; it is returned as bytes for the JSON path to read.

use bytes::Bytes;

use super::push::{at_end, frame_groups, Budget};
use super::reader::{bounded, Reader};
use super::{BinaryError, Limits};
use crate::PushItem;

pub const MAGIC: &[u8; 4] = b"QTB1";
pub const FLAG_COUNTS: u8 = 2;

#[derive(Debug, Clone)]
pub struct TxnBody {
    /// The client asked for counts of the pushes and acks instead of one result each.
    pub counts: bool,
    /// The JSON head (empty when the client sent none), a view of the body.
    pub head: Bytes,
    /// The pushed messages, in wire order; their results follow the head's operations.
    pub items: Vec<PushItem>,
}

pub fn decode(body: &Bytes, limits: Limits) -> Result<TxnBody, BinaryError> {
    let mut r = Reader::new(body);
    if r.take(4, "magic")? != MAGIC {
        return Err(BinaryError::malformed("the body does not start with QTB1"));
    }
    let flags = r.u8("flags")?;
    if flags & !FLAG_COUNTS != 0 {
        return Err(BinaryError::malformed(format!("unknown flags {flags:#x}")));
    }
    let head_len = bounded(r.u32("head length")?, limits.max_bytes, "bytes of head")?;
    let head = body.slice_ref(r.take(head_len, "head")?);
    let mut budget = Budget::new(limits);
    let mut items = Vec::new();
    frame_groups(&mut r, &mut budget, &mut items)?;
    at_end(&r)?;
    Ok(TxnBody {
        counts: flags & FLAG_COUNTS != 0,
        head,
        items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::fuzzing::txn_body;

    const LIMITS: Limits = Limits {
        max_bytes: 1 << 20,
        max_items: 1000,
    };

    #[test]
    fn a_body_decodes_and_every_truncation_fails() {
        let body = txn_body();
        let t = decode(&Bytes::from(body.clone()), LIMITS);
        let Ok(t) = t else { panic!("{t:?}") };
        assert_eq!(&t.head[..], br#"{"operations":[]}"#);
        assert_eq!(t.items.len(), 3);
        assert!(!t.counts);
        for cut in 0..body.len() {
            assert!(
                decode(&Bytes::copy_from_slice(&body[..cut]), LIMITS).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn an_oversized_head_or_item_count_is_refused() {
        let mut body = b"QTB1\x00".to_vec();
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode(&Bytes::from(body), LIMITS),
            Err(BinaryError::TooLarge(_))
        ));
        let few = Limits {
            max_bytes: 1 << 20,
            max_items: 2,
        };
        assert!(matches!(
            decode(&Bytes::from(txn_body()), few),
            Err(BinaryError::TooLarge(_))
        ));
    }
}
