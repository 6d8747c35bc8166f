//! The `connections` pool as the tests of answers and reservations see it: answer bytes
//! counted against a share, nothing else.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::meter::ConnectionMeter;

#[derive(Debug, Default)]
pub(crate) struct Pool {
    pub(crate) bytes: AtomicUsize,
    pub(crate) share: usize,
}

impl ConnectionMeter for Pool {
    fn connection(&self, _open: bool) {}
    fn request(&self, _started: bool) {}
    fn answer(&self, bytes: usize, held: bool) {
        if held {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
    fn over_share(&self) -> bool {
        self.bytes.load(Ordering::Relaxed) > self.share
    }
    fn answer_room(&self) -> usize {
        self.share
    }
}
