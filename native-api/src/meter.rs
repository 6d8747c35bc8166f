//! How the door tells its owner what its connections cost. This crate knows nothing of the
//! broker's memory budget: it reports connections, requests and answer bytes as they come and
//! go, the owner turns them into bytes (docs/memory.md, the `connections` pool) and says when
//! they are over their share (then `crate::answer` refuses new requests) and how much room big
//! answers may reserve before they are built (`crate::reserve`).

use std::fmt;
use std::sync::Arc;

/// Told of every connection and request of the door, in pairs: every `true` is followed by
/// exactly one `false` for the same thing, also when the client goes away.
pub trait ConnectionMeter: Send + Sync + fmt::Debug {
    /// A connection was accepted (`true`) or has closed (`false`).
    fn connection(&self, open: bool);
    /// A request began being handled (`true`) or its handler finished (`false`).
    fn request(&self, started: bool);
    /// `bytes` of an answer are held (`true`: its handler returned it) or were handed to the
    /// connection's buffers or dropped (`false`).
    fn answer(&self, bytes: usize, held: bool);
    /// Whether what is counted is over the share of the budget it was given.
    fn over_share(&self) -> bool;
    /// Bytes that answers being built may reserve at once (`crate::reserve`); 0: none are
    /// reserved.
    fn answer_room(&self) -> usize;
}

/// Reports the closing half of a pair when dropped.
pub(crate) struct Metered {
    meter: Option<Arc<dyn ConnectionMeter>>,
    what: What,
}

#[derive(Clone, Copy)]
pub(crate) enum What {
    Connection,
    Request,
}

impl Metered {
    pub(crate) fn begin(meter: &Option<Arc<dyn ConnectionMeter>>, what: What) -> Metered {
        if let Some(m) = meter {
            match what {
                What::Connection => m.connection(true),
                What::Request => m.request(true),
            }
        }
        Metered {
            meter: meter.clone(),
            what,
        }
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        if let Some(m) = &self.meter {
            match self.what {
                What::Connection => m.connection(false),
                What::Request => m.request(false),
            }
        }
    }
}
