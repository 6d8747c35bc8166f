//! The tenant's key/value rows (spec §2.13). Lock permits are rows here too (§2.14).
//!
//! A row past its expiry still sits here until the planner's sweep deletes it; readers and
//! judges never see it (`live`), so when the sweep runs changes no answer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use queenmq_protocol::{streams_row_query, STREAMS_NS};

use crate::codec::{DecodeError, Reader, Writer};

/// The most bytes the KV rows of one tenant may hold (as [`row_bytes`] counts them). A
/// constant, not configuration: the planner refuses past it, and every replica must agree
/// on the state that refusal leaves.
pub const MAX_KV_BYTES: usize = 256 << 20;
/// What a row costs beside its strings: the map entry (key pair and row), the expiry index
/// entry (which holds the namespace and key again, counted in `row_bytes`) and the B-tree
/// nodes' slack (nodes of 11 slots are half empty at worst).
const ROW_OVERHEAD: usize = 2
    * (std::mem::size_of::<(String, String)>()
        + std::mem::size_of::<KvRow>()
        + std::mem::size_of::<(i64, String, String)>());

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvRow {
    /// JSON text.
    pub value: String,
    pub version: u64,
    pub expires_at_us: Option<i64>,
    pub updated_at_us: i64,
}

impl KvRow {
    pub fn is_live(&self, now_us: i64) -> bool {
        self.expires_at_us.is_none_or(|at| at > now_us)
    }
}

/// The streams query whose state row (ns, key) is, if it is one.
pub fn streams_query<'k>(ns: &str, key: &'k str) -> Option<&'k str> {
    (ns == STREAMS_NS).then(|| streams_row_query(key)).flatten()
}

/// What one row holds in memory, strings at their length (apply builds them from the entry's
/// text, so capacity is length) and the namespace and key twice (map and expiry index).
pub fn row_bytes(ns: &str, key: &str, value: &str) -> usize {
    2 * (ns.len() + key.len()) + value.len() + ROW_OVERHEAD
}

#[derive(Debug)]
pub struct KvTable {
    rows: BTreeMap<(String, String), KvRow>,
    /// The highest version minted (tenant-global; versions only rise, so lock tokens do).
    pub last_version: u64,
    /// Derived: rows with an expiry, by expiry, for the sweep.
    expiry: BTreeSet<(i64, String, String)>,
    /// Derived: the sum of `row_bytes` over the rows.
    bytes: usize,
    /// Derived: (rows, `row_bytes`) of each streams query's state rows, for its cap
    /// (plan/streams_cap.rs) without a walk of the query's rows per cycle.
    streams: HashMap<String, (u64, u64)>,
    /// [`MAX_KV_BYTES`]; lower only in tests, which cannot fill 256 MiB.
    cap: usize,
}

impl Default for KvTable {
    fn default() -> Self {
        KvTable {
            rows: BTreeMap::new(),
            last_version: 0,
            expiry: BTreeSet::new(),
            bytes: 0,
            streams: HashMap::new(),
            cap: MAX_KV_BYTES,
        }
    }
}

impl KvTable {
    /// The most bytes the rows may hold.
    pub fn cap(&self) -> usize {
        self.cap
    }

    #[cfg(test)]
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap;
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The row, expired or not (what it holds in memory until the sweep).
    pub fn row(&self, ns: &str, key: &str) -> Option<&KvRow> {
        self.rows.get(&(ns.to_string(), key.to_string()))
    }

    /// The row, if it has not expired at `now_us`.
    pub fn live(&self, ns: &str, key: &str, now_us: i64) -> Option<&KvRow> {
        // A BTreeMap keyed by owned pairs is searched with an owned pair.
        self.rows
            .get(&(ns.to_string(), key.to_string()))
            .filter(|r| r.is_live(now_us))
    }

    /// Live rows of `ns` whose key starts with `prefix`, after `after`, in key order.
    pub fn prefix<'a>(
        &'a self,
        ns: &'a str,
        prefix: &'a str,
        after: Option<&'a str>,
        now_us: i64,
    ) -> impl Iterator<Item = (&'a str, &'a KvRow)> + 'a {
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded((ns.to_string(), a.to_string())),
            _ => Bound::Included((ns.to_string(), prefix.to_string())),
        };
        self.rows
            .range((start, Bound::Unbounded))
            .take_while(move |((n, k), _)| n == ns && k.starts_with(prefix))
            .filter(move |(_, r)| r.is_live(now_us))
            .map(|((_, k), r)| (k.as_str(), r))
    }

    pub fn put(&mut self, ns: &str, key: &str, row: KvRow) {
        self.last_version = self.last_version.max(row.version);
        self.remove(ns, key);
        let bytes = row_bytes(ns, key, &row.value);
        self.bytes = self.bytes.saturating_add(bytes);
        if let Some(q) = streams_query(ns, key) {
            let held = self.streams.entry(q.to_string()).or_default();
            held.0 += 1;
            held.1 = held.1.saturating_add(bytes as u64);
        }
        if let Some(at) = row.expires_at_us {
            self.expiry.insert((at, ns.to_string(), key.to_string()));
        }
        self.rows.insert((ns.to_string(), key.to_string()), row);
    }

    pub fn remove(&mut self, ns: &str, key: &str) -> Option<KvRow> {
        let old = self.rows.remove(&(ns.to_string(), key.to_string()))?;
        let bytes = row_bytes(ns, key, &old.value);
        self.bytes = self.bytes.saturating_sub(bytes);
        if let Some(q) = streams_query(ns, key) {
            if let Some(held) = self.streams.get_mut(q) {
                held.0 = held.0.saturating_sub(1);
                held.1 = held.1.saturating_sub(bytes as u64);
                if held.0 == 0 {
                    self.streams.remove(q);
                }
            }
        }
        if let Some(at) = old.expires_at_us {
            self.expiry.remove(&(at, ns.to_string(), key.to_string()));
        }
        Some(old)
    }

    /// (rows, bytes as [`row_bytes`] counts them) of a streams query's state rows.
    pub fn streams_state(&self, query_id: &str) -> (u64, u64) {
        self.streams.get(query_id).copied().unwrap_or_default()
    }

    /// Up to `max` rows expired at `now_us`, oldest expiry first.
    pub fn expired(&self, now_us: i64, max: usize) -> Vec<(String, String)> {
        self.expiry
            .iter()
            .take_while(|(at, _, _)| *at <= now_us)
            .take(max)
            .map(|(_, ns, key)| (ns.clone(), key.clone()))
            .collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &KvRow)> {
        self.rows
            .iter()
            .map(|((n, k), r)| (n.as_str(), k.as_str(), r))
    }

    /// Checkpoint section tag 1 (docs/storage-format.md "KV section").
    pub fn encode(&self, w: &mut Writer) {
        w.u64(self.last_version);
        w.u32(self.rows.len() as u32);
        for ((ns, key), r) in &self.rows {
            w.str(ns);
            w.str(key);
            w.str(&r.value);
            w.u64(r.version);
            encode_expiry(w, r.expires_at_us);
            w.i64(r.updated_at_us);
        }
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<KvTable, DecodeError> {
        let mut t = KvTable {
            last_version: r.u64()?,
            ..Default::default()
        };
        let last = t.last_version;
        let n = r.count(4 * 3 + 8 + 1 + 8)?;
        for _ in 0..n {
            let ns = r.str()?;
            let key = r.str()?;
            let row = KvRow {
                value: r.string()?,
                version: r.u64()?,
                expires_at_us: decode_expiry(r)?,
                updated_at_us: r.i64()?,
            };
            if t.rows.contains_key(&(ns.to_string(), key.to_string())) {
                return Err(r.malformed(format!("kv row {ns:?}/{key:?} appears twice")));
            }
            t.put(ns, key, row);
        }
        if t.last_version != last {
            return Err(r.malformed(format!(
                "a kv row's version is above the last version {last}"
            )));
        }
        Ok(t)
    }
}

pub fn encode_expiry(w: &mut Writer, at: Option<i64>) {
    match at {
        None => w.u8(0),
        Some(at) => {
            w.u8(1);
            w.i64(at);
        }
    }
}

pub fn decode_expiry(r: &mut Reader<'_>) -> Result<Option<i64>, DecodeError> {
    match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(r.i64()?)),
        v => Err(r.malformed(format!("expiry tag {v}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(version: u64, expires_at_us: Option<i64>) -> KvRow {
        KvRow {
            value: format!("{version}"),
            version,
            expires_at_us,
            updated_at_us: 1,
        }
    }

    #[test]
    fn expired_rows_are_not_live_and_are_listed_for_the_sweep() {
        let mut t = KvTable::default();
        t.put("ns", "a", row(1, Some(10)));
        t.put("ns", "b", row(2, None));
        t.put("ns", "c", row(3, Some(20)));
        assert!(t.live("ns", "a", 9).is_some());
        assert!(t.live("ns", "a", 10).is_none());
        assert_eq!(t.expired(15, 10), vec![("ns".into(), "a".into())]);
        assert_eq!(t.expired(25, 1).len(), 1, "bounded");
        let keys: Vec<_> = t.prefix("ns", "", None, 15).map(|(k, _)| k).collect();
        assert_eq!(keys, ["b", "c"]);
    }

    #[test]
    fn bytes_follow_puts_and_removes() {
        let mut t = KvTable::default();
        t.put("ns", "a", row(1, Some(10)));
        let one = t.bytes();
        assert_eq!(one, row_bytes("ns", "a", "1"));
        t.put("ns", "a", row(22, Some(11)));
        assert_eq!(t.bytes(), row_bytes("ns", "a", "22"));
        assert_eq!(t.expired(100, 10).len(), 1, "the old expiry entry left");
        t.remove("ns", "a");
        assert_eq!((t.bytes(), t.expired(100, 10).len()), (0, 0));
    }

    #[test]
    fn a_streams_query_state_is_counted_as_its_rows_come_and_go() {
        let mut t = KvTable::default();
        let ns = STREAMS_NS;
        t.put(ns, "row/q1/7/a", row(1, None));
        t.put(ns, "row/q1/8/b", row(2, None));
        t.put(ns, "row/q2/7/a", row(3, None));
        t.put(ns, "id/q1", row(4, None));
        t.put("other", "row/q1/7/z", row(5, None));
        let a = row_bytes(ns, "row/q1/7/a", "1") as u64;
        let b = row_bytes(ns, "row/q1/8/b", "2") as u64;
        assert_eq!(t.streams_state("q1"), (2, a + b));
        t.put(ns, "row/q1/7/a", row(100, None));
        let a2 = row_bytes(ns, "row/q1/7/a", "100") as u64;
        assert_eq!(t.streams_state("q1"), (2, a2 + b));
        t.remove(ns, "row/q1/7/a");
        t.remove(ns, "row/q1/8/b");
        assert_eq!(t.streams_state("q1"), (0, 0));
        assert_eq!(t.streams_state("q2").0, 1);
        assert!(
            !t.streams.contains_key("q1"),
            "an empty query leaves the map"
        );
    }

    #[test]
    fn prefix_is_starts_with_and_pages_after_a_key() {
        let mut t = KvTable::default();
        for (i, k) in ["w%_:x", "walk:0", "walk:1", "walk:2", "walkz", "x"]
            .iter()
            .enumerate()
        {
            t.put("ns", k, row(i as u64 + 1, None));
        }
        t.put("other", "walk:9", row(9, None));
        let page: Vec<_> = t
            .prefix("ns", "walk:", Some("walk:0"), 0)
            .map(|(k, _)| k)
            .collect();
        assert_eq!(page, ["walk:1", "walk:2"]);
        let weird: Vec<_> = t.prefix("ns", "w%_:", None, 0).map(|(k, _)| k).collect();
        assert_eq!(weird, ["w%_:x"]);
    }

    #[test]
    fn the_section_round_trips_and_refuses_a_version_above_the_last() {
        let mut t = KvTable::default();
        t.put("ns", "a", row(4, Some(10)));
        t.put("ns", "b", row(7, None));
        let mut w = Writer::default();
        t.encode(&mut w);
        let back = KvTable::decode(&mut Reader::new(&w.buf)).unwrap();
        assert_eq!(back.last_version, 7);
        assert_eq!(back.bytes(), t.bytes());
        assert_eq!(back.expired(100, 10), t.expired(100, 10));
        let mut bad = w.buf.clone();
        bad[..8].copy_from_slice(&5u64.to_le_bytes());
        assert!(KvTable::decode(&mut Reader::new(&bad)).is_err());
    }
}
