//! Fetch sessions (KIP-227), as Kafka's broker keeps them (`FetchSession.scala`): a consumer
//! that fetched its partitions once in full then names only the partitions whose position
//! moved, and is answered only the partitions with something new.
//!
//! Sessions are this node's memory, not engine state: a restart forgets them, and clients
//! answered FETCH_SESSION_ID_NOT_FOUND start a new one. They are node-wide (a client may
//! reconnect and go on) but belong to the user that made them. At most
//! `kafka_fetch_session_slots` of them are held, within [`MAX_BYTES`]; past that a new one
//! evicts the least recently used if it has been idle [`EVICT_IDLE`], else the smallest
//! created at least [`EVICT_IDLE`] ago if the new one is larger, else the fetch is answered
//! sessionless — what Kafka does.
//!
//! The node-wide map is locked only to find, add or remove a session and to check its
//! epoch (O(1) or O(log n) each); a session's own work (its partitions) runs under that
//! session's lock, so one client's large session never holds up another's fetch.

pub mod session;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ring::rand::{SecureRandom, SystemRandom};
use tokio::time::Instant;

use crate::errors;
use crate::fetch::FetchPartition;
use crate::topics::valid_topic_name;
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
/// Sessions a creation looks at, smallest first, for ones old enough to evict: a bounded
/// walk, whatever the number of young sessions.
pub const EVICT_CANDIDATES: usize = 64;

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

/// A session as the node-wide map holds it: what epochs, ownership and eviction need,
/// kept here so they never wait for the session's own lock.
struct Held {
    session: Arc<Mutex<Session>>,
    owner: Owner,
    next_epoch: i32,
    created: Instant,
    last_used: Instant,
    len: usize,
    /// [`Session::bytes`] plus the owner, as last measured.
    bytes: usize,
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<i32, Held>,
    /// Least recently used first.
    lru: BTreeSet<(Instant, i32)>,
    /// Fewest partitions first.
    by_size: BTreeSet<(usize, i32)>,
    /// The sum of the sessions' bytes.
    bytes: usize,
    /// The most `bytes` ever was (what tests check the bound with).
    peak: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    fn insert(&mut self, id: i32, held: Held) {
        self.lru.insert((held.last_used, id));
        self.by_size.insert((held.len, id));
        self.bytes = self.bytes.saturating_add(held.bytes);
        self.peak = self.peak.max(self.bytes);
        self.sessions.insert(id, held);
    }

    /// Removes `id`, returning its session so that the caller drops it (a large one frees
    /// many allocations) after unlocking.
    fn remove(&mut self, id: i32) -> Option<Arc<Mutex<Session>>> {
        let held = self.sessions.remove(&id)?;
        self.lru.remove(&(held.last_used, id));
        self.by_size.remove(&(held.len, id));
        self.bytes = self.bytes.saturating_sub(held.bytes);
        Some(held.session)
    }

    fn touch(&mut self, id: i32, now: Instant) {
        if let Some(h) = self.sessions.get_mut(&id) {
            self.lru.remove(&(h.last_used, id));
            h.last_used = now;
            self.lru.insert((now, id));
        }
    }

    /// Records a session's new size, if `id` still holds that session.
    fn resize(&mut self, id: i32, session: &Arc<Mutex<Session>>, len: usize, bytes: usize) {
        let Some(h) = self.sessions.get_mut(&id) else {
            return;
        };
        if !Arc::ptr_eq(&h.session, session) {
            return;
        }
        self.by_size.remove(&(h.len, id));
        self.by_size.insert((len, id));
        self.bytes = self.bytes.saturating_sub(h.bytes).saturating_add(bytes);
        self.peak = self.peak.max(self.bytes);
        (h.len, h.bytes) = (len, bytes);
    }

    /// Makes room for one more session of `len` partitions and `bytes`: evicts sessions idle
    /// [`EVICT_IDLE`] (least recently used first), then sessions created at least
    /// [`EVICT_IDLE`] ago with fewer partitions than the new one (fewest first, among the
    /// [`EVICT_CANDIDATES`] smallest), at most [`MAX_EVICTIONS`] of them, and only if that
    /// frees enough; false (and nothing evicted) otherwise. The evicted sessions are
    /// returned, to be dropped after unlocking.
    fn make_room(
        &mut self,
        slots: usize,
        len: usize,
        bytes: usize,
        now: Instant,
    ) -> Option<Vec<Arc<Mutex<Session>>>> {
        let slots_short = (self.sessions.len() + 1).saturating_sub(slots);
        let bytes_short = self.bytes.saturating_add(bytes).saturating_sub(MAX_BYTES);
        if slots_short == 0 && bytes_short == 0 {
            return Some(Vec::new());
        }
        let idle = self
            .lru
            .iter()
            .take_while(|(used, _)| now.saturating_duration_since(*used) >= EVICT_IDLE)
            .map(|(_, id)| *id)
            .take(MAX_EVICTIONS);
        let old_and_small = self
            .by_size
            .iter()
            .take(EVICT_CANDIDATES)
            .take_while(|(n, _)| *n < len)
            .map(|(_, id)| *id)
            .filter(|id| {
                self.sessions.get(id).is_some_and(|h| {
                    now.saturating_duration_since(h.created) >= EVICT_IDLE
                        && now.saturating_duration_since(h.last_used) < EVICT_IDLE
                })
            });
        let (mut freed_slots, mut freed_bytes, mut victims) = (0, 0usize, Vec::new());
        for id in idle.chain(old_and_small).take(MAX_EVICTIONS) {
            victims.push(id);
            freed_slots += 1;
            freed_bytes += self.sessions.get(&id).map_or(0, |h| h.bytes);
            if freed_slots >= slots_short && freed_bytes >= bytes_short {
                let gone = victims.into_iter().filter_map(|id| self.remove(id));
                let gone: Vec<_> = gone.collect();
                metrics::counter!("queen_kafka_fetch_session_evictions_total")
                    .increment(gone.len() as u64);
                return Some(gone);
            }
        }
        None
    }

    fn publish(&self) {
        metrics::gauge!("queen_kafka_fetch_sessions").set(self.sessions.len() as f64);
        metrics::gauge!("queen_kafka_fetch_session_bytes").set(self.bytes as f64);
    }
}

/// Partitions a request lists or forgets, counted without allocating.
fn count(asked: &[(String, Vec<FetchPartition>)], forgotten: &[Forgotten]) -> (usize, usize) {
    let listed = asked.iter().map(|(_, p)| p.len()).sum();
    let gone = forgotten.iter().map(|(_, p)| p.len()).sum();
    (listed, gone)
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
        lock(&self.inner)
    }

    /// Closes `id` and publishes; the session is dropped after the node lock is released.
    fn close(&self, id: i32) {
        let gone = {
            let mut inner = self.inner();
            let gone = inner.remove(id);
            inner.publish();
            gone
        };
        drop(gone);
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
        let session = {
            let mut inner = self.inner();
            if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
                let mine = inner.sessions.get(&id).is_some_and(|h| h.owner == *owner);
                let gone = if id != NO_SESSION && mine {
                    inner.remove(id)
                } else {
                    None
                };
                inner.publish();
                drop(inner);
                drop(gone);
                return if epoch == FINAL_EPOCH || self.slots == 0 {
                    Begin::Sessionless
                } else {
                    Begin::Full
                };
            }
            // Another user's session is as unknown to this one as one that never was.
            let Some(h) = inner.sessions.get_mut(&id).filter(|h| h.owner == *owner) else {
                return Begin::Refused(errors::FETCH_SESSION_ID_NOT_FOUND);
            };
            if h.next_epoch != epoch {
                return Begin::Refused(errors::INVALID_FETCH_SESSION_EPOCH);
            }
            h.next_epoch = next_epoch(epoch);
            let session = h.session.clone();
            inner.touch(id, now);
            session
        };
        // Refused before anything changes, in O(listed + forgotten): a request larger than
        // a session may hold, or naming a topic no fetch can read (never cached), closes
        // the session and is answered sessionless; the client's next fetch is a full one.
        let (listed, gone) = count(asked, forgotten);
        let fits = listed <= MAX_PARTITIONS
            && gone <= MAX_PARTITIONS
            && asked.iter().all(|(t, _)| valid_topic_name(t));
        let mut s = lock(&session);
        let len = if fits {
            s.len_after(asked, forgotten)
        } else {
            0
        };
        // Emptied (Kafka closes it too), or grown past what one session may hold.
        if len == 0 || len > MAX_PARTITIONS {
            drop(s);
            self.close(id);
            return Begin::Sessionless;
        }
        s.update(asked, forgotten);
        let (len, bytes) = (s.len(), s.bytes() + owner.bytes());
        let parts = s.snapshot();
        drop(s);
        let mut inner = self.inner();
        inner.resize(id, &session, len, bytes);
        let over = inner.bytes > MAX_BYTES;
        let gone = if over { inner.remove(id) } else { None };
        inner.publish();
        drop(inner);
        drop(gone);
        if over {
            Begin::Sessionless
        } else {
            Begin::Incremental { id, parts }
        }
    }

    /// Offers a new session of the partitions a full fetch answered: its id, or
    /// [`NO_SESSION`] when there is no room for it (the fetch stays a sessionless one).
    /// A fetch naming a topic no fetch can read gets none: such names are never cached.
    pub fn create(&self, owner: Owner, answered: &[(Key, Cached)], now: Instant) -> i32 {
        if self.slots == 0
            || answered.is_empty()
            || answered.len() > MAX_PARTITIONS
            || !answered.iter().all(|((t, _), _)| valid_topic_name(t))
        {
            return NO_SESSION;
        }
        let session = Session::new(answered);
        let (len, bytes) = (session.len(), session.bytes() + owner.bytes());
        let mut inner = self.inner();
        let evicted = inner.make_room(self.slots, len, bytes, now);
        let id = match &evicted {
            Some(_) => self.new_id(&inner),
            None => None,
        };
        if let Some(id) = id {
            let held = Held {
                session: Arc::new(Mutex::new(session)),
                owner,
                next_epoch: 1,
                created: now,
                last_used: now,
                len,
                bytes,
            };
            inner.insert(id, held);
        }
        inner.publish();
        drop(inner);
        drop(evicted);
        id.unwrap_or(NO_SESSION)
    }

    /// Remembers what an incremental answer told; nothing if the session is gone meanwhile.
    pub fn settle(&self, owner: &Owner, id: i32, results: &[(Key, Seen)], now: Instant) {
        let session = {
            let mut inner = self.inner();
            let Some(h) = inner.sessions.get(&id).filter(|h| h.owner == *owner) else {
                return;
            };
            let session = h.session.clone();
            inner.touch(id, now);
            session
        };
        let mut s = lock(&session);
        s.settle(results);
        let (len, bytes) = (s.len(), s.bytes() + owner.bytes());
        drop(s);
        let mut inner = self.inner();
        inner.resize(id, &session, len, bytes);
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

    /// The most the sessions ever held, counted by capacity.
    pub fn peak_bytes(&self) -> usize {
        self.inner().peak
    }
}

#[cfg(test)]
mod tests;
