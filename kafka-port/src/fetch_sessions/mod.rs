//! Fetch sessions (KIP-227), as Kafka's broker keeps them (`FetchSession.scala`): a consumer
//! that fetched its partitions once in full then names only the partitions whose position
//! moved, and is answered only the partitions with something new.
//!
//! Sessions are this node's memory, not engine state: a restart forgets them, and clients
//! answered FETCH_SESSION_ID_NOT_FOUND start a new one. They are node-wide (a client may
//! reconnect and go on) but belong to the user that made them. At most
//! `kafka_fetch_session_slots` of them are held, within [`MAX_BYTES`]; past that a new one
//! evicts the least recently used if it has been idle [`EVICT_IDLE`], else the smallest if
//! the new one is larger, else the fetch is answered sessionless — what Kafka does.

pub mod session;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ring::rand::{SecureRandom, SystemRandom};
use tokio::time::Instant;

use crate::errors;
use crate::fetch::FetchPartition;
use session::{next_epoch, Cached, Forgotten, Key, Owner, Seen, Session};

/// The epoch of a full fetch that asks for a new session.
pub const INITIAL_EPOCH: i32 = 0;
/// The epoch of a full fetch that wants no session (and closes the one it names).
pub const FINAL_EPOCH: i32 = -1;
/// The id of no session.
pub const NO_SESSION: i32 = 0;
/// Partitions one session holds at most; a consumer fetching more is served sessionless.
pub const MAX_PARTITIONS: usize = 10_000;
/// What all sessions hold at most, counted by capacity ([`Session::bytes`]).
pub const MAX_BYTES: usize = 64 << 20;
/// A session unused this long is evicted for a new one whatever their sizes (Kafka's
/// `MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS`).
pub const EVICT_IDLE: Duration = Duration::from_secs(120);
/// Sessions one new session may evict: the bytes bound can ask for several, but a
/// creation never walks the whole cache evicting.
pub const MAX_EVICTIONS: usize = 16;

/// How a fetch is to be answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Begin {
    /// Every partition asked, with session id 0.
    Sessionless,
    /// Every partition asked, then a new session is offered ([`FetchSessions::create`]).
    Full,
    /// The session's partitions are read, in this order; only those with something new
    /// are answered ([`FetchSessions::settle`]).
    Incremental { id: i32, parts: Vec<(Key, Cached)> },
    /// No partition: this top-level error, with session id 0.
    Refused(i16),
}

pub struct FetchSessions {
    slots: usize,
    inner: Mutex<Inner>,
    random: SystemRandom,
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<i32, Session>,
    /// The sum of the sessions' [`Session::bytes`].
    bytes: usize,
}

impl Inner {
    /// Replaces `id`'s entry (or removes it with `None`), keeping `bytes` exact.
    fn put(&mut self, id: i32, session: Option<Session>) {
        if let Some(old) = self.sessions.remove(&id) {
            self.bytes = self.bytes.saturating_sub(old.bytes());
        }
        if let Some(s) = session {
            self.bytes = self.bytes.saturating_add(s.bytes());
            self.sessions.insert(id, s);
        }
    }

    /// Makes room for one more session of `len` partitions and `bytes`: evicts sessions idle
    /// [`EVICT_IDLE`] (least recently used first), then sessions with fewer partitions than
    /// the new one (fewest first), at most [`MAX_EVICTIONS`] of them, and only if that
    /// frees enough; false (and nothing evicted) otherwise.
    fn make_room(&mut self, slots: usize, len: usize, bytes: usize, now: Instant) -> bool {
        let slots_short = (self.sessions.len() + 1).saturating_sub(slots);
        let bytes_short = self.bytes.saturating_add(bytes).saturating_sub(MAX_BYTES);
        if slots_short == 0 && bytes_short == 0 {
            return true;
        }
        let mut idle = Vec::new();
        let mut small = Vec::new();
        for (id, s) in &self.sessions {
            if now.saturating_duration_since(s.last_used) >= EVICT_IDLE {
                idle.push((s.last_used, *id));
            } else if s.len() < len {
                small.push((s.len(), s.last_used, *id));
            }
        }
        idle.sort_unstable();
        small.sort_unstable();
        let order = idle
            .into_iter()
            .map(|(_, id)| id)
            .chain(small.into_iter().map(|(_, _, id)| id));
        let (mut freed_slots, mut freed_bytes, mut victims) = (0, 0usize, Vec::new());
        for id in order.take(MAX_EVICTIONS) {
            victims.push(id);
            freed_slots += 1;
            freed_bytes += self.sessions.get(&id).map_or(0, Session::bytes);
            if freed_slots >= slots_short && freed_bytes >= bytes_short {
                for id in victims {
                    self.put(id, None);
                    metrics::counter!("queen_kafka_fetch_session_evictions_total").increment(1);
                }
                return true;
            }
        }
        false
    }

    fn publish(&self) {
        metrics::gauge!("queen_kafka_fetch_sessions").set(self.sessions.len() as f64);
        metrics::gauge!("queen_kafka_fetch_session_bytes").set(self.bytes as f64);
    }
}

impl FetchSessions {
    /// A cache of `slots` sessions (0: every fetch is answered sessionless).
    pub fn new(slots: usize) -> Self {
        FetchSessions {
            slots,
            inner: Mutex::default(),
            random: SystemRandom::new(),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads a fetch's session fields (Kafka's `FetchManager.newContext`): a full fetch
    /// closes the session it names, an incremental one updates its session and takes the
    /// next epoch.
    pub fn begin(
        &self,
        owner: &Owner,
        id: i32,
        epoch: i32,
        asked: &[(String, Vec<FetchPartition>)],
        forgotten: &[Forgotten],
        now: Instant,
    ) -> Begin {
        let mut inner = self.inner();
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            if id != NO_SESSION && inner.sessions.get(&id).is_some_and(|s| s.owner == *owner) {
                inner.put(id, None);
                inner.publish();
            }
            return if epoch == FINAL_EPOCH || self.slots == 0 {
                Begin::Sessionless
            } else {
                Begin::Full
            };
        }
        // Another user's session is as unknown to this one as one that never was.
        let Some(s) = inner.sessions.get_mut(&id).filter(|s| s.owner == *owner) else {
            return Begin::Refused(errors::FETCH_SESSION_ID_NOT_FOUND);
        };
        if s.next_epoch != epoch {
            return Begin::Refused(errors::INVALID_FETCH_SESSION_EPOCH);
        }
        let before = s.bytes();
        s.update(asked, forgotten);
        s.next_epoch = next_epoch(epoch);
        s.last_used = now;
        let (len, after) = (s.len(), s.bytes());
        let parts = (len <= MAX_PARTITIONS).then(|| s.snapshot());
        inner.bytes = inner.bytes.saturating_sub(before).saturating_add(after);
        // Emptied (Kafka closes it too), or grown past what one session may hold: closed,
        // and this fetch answered sessionless; the client's next fetch is a full one.
        let answer = match parts {
            Some(parts) if len > 0 && inner.bytes <= MAX_BYTES => Begin::Incremental { id, parts },
            _ => {
                inner.put(id, None);
                Begin::Sessionless
            }
        };
        inner.publish();
        answer
    }

    /// Offers a new session of the partitions a full fetch answered: its id, or
    /// [`NO_SESSION`] when there is no room for it (the fetch stays a sessionless one).
    pub fn create(&self, owner: Owner, answered: &[(Key, Cached)], now: Instant) -> i32 {
        if self.slots == 0 || answered.is_empty() || answered.len() > MAX_PARTITIONS {
            return NO_SESSION;
        }
        let session = Session::new(owner, now, answered);
        let mut inner = self.inner();
        let id = if inner.make_room(self.slots, session.len(), session.bytes(), now) {
            self.new_id(&inner)
        } else {
            None
        };
        if let Some(id) = id {
            inner.put(id, Some(session));
        }
        inner.publish();
        id.unwrap_or(NO_SESSION)
    }

    /// Remembers what an incremental answer told; nothing if the session is gone meanwhile.
    pub fn settle(&self, owner: &Owner, id: i32, results: &[(Key, Seen)], now: Instant) {
        let mut inner = self.inner();
        let Some(s) = inner.sessions.get_mut(&id).filter(|s| s.owner == *owner) else {
            return;
        };
        let before = s.bytes();
        s.settle(results);
        s.last_used = now;
        let after = s.bytes();
        inner.bytes = inner.bytes.saturating_sub(before).saturating_add(after);
        inner.publish();
    }

    /// An unpredictable id no live session has: positive, as kafka-python reads -1 as
    /// "throttled". None only if the system's random source fails.
    fn new_id(&self, inner: &Inner) -> Option<i32> {
        for _ in 0..16 {
            let mut b = [0u8; 4];
            self.random.fill(&mut b).ok()?;
            let id = i32::from_le_bytes(b) & i32::MAX;
            if id != NO_SESSION && !inner.sessions.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    /// Sessions held now.
    pub fn len(&self) -> usize {
        self.inner().sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the sessions hold, counted by capacity.
    pub fn bytes(&self) -> usize {
        self.inner().bytes
    }
}

#[cfg(test)]
mod tests;
