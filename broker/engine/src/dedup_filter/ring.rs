//! The generation ring: the longest dedup window cut into G generations, each a blocked Bloom
//! filter carved out of one allocation whose size is configured (`dedup_filter_bytes`), so the
//! filters' memory is fixed whatever the push rate.
//!
//! Generations are laid out in the allocation as a circular FIFO: a new generation takes the
//! blocks right after the newest one (or from block 0 when they do not fit before the end),
//! and the oldest generations give their blocks back when they leave the window or when a new
//! generation needs them. The second case drops ids that are still inside the window: the
//! window is then shorter than configured, never the memory larger and never a push refused.
//!
//! Why arenas (review s28 finding 2): a group's filters are drawn for the rate it shows at its
//! first spill, and a rate that rises later would keep filling the same bits for good. The
//! allocation generations are carved from is an [`Arena`]; a bigger one can be handed in
//! (`grow`), and from the next generation opened on, generations are carved from it. Older
//! generations keep their bits (and their size) in the old arena, which is freed, with the
//! allowance it was drawn from, once its last generation has left the window. So a lookup
//! asks generations of mixed sizes: each filter knows its own blocks.

use std::collections::VecDeque;

use super::allowance::FilterDraw;
use super::bloom::{contains, contains_tagged, insert_tagged, probes_for, Block, BLOCK_BYTES};

/// Shares are sized for the previous generation's rate plus this much (in quarters): a
/// steady rate fills a generation to 80 % of its share, a rate rising by more than a quarter
/// within one generation closes it early.
const HEADROOM_QUARTERS: u64 = 5;
/// Room for this many generations is the least `dedup_filter_bytes` may give.
const MIN_BLOCKS_PER_GENERATION: u64 = 2;
/// Range checks of the configuration (the key is read from the operator's file).
pub const MAX_FILTER_BYTES: u64 = 1 << 40;
pub const MAX_GENERATIONS: u32 = 1024;
pub const MAX_BITS_PER_KEY: u32 = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterConfig {
    /// Bytes of the one allocation holding every generation's filter.
    pub bytes: u64,
    /// Generations per longest window (G).
    pub generations: u32,
    /// Filter bits per id at a generation's share (10: about 1 % false positives).
    pub bits_per_key: u32,
    /// Every generation takes 1/(G + 1) of the allocation and any number of ids (review s26
    /// H1): the window's G + 1 generations always fit, so none is dropped while inside the
    /// window whatever the rate; a rate above what the share holds at `bits_per_key` raises
    /// the false-positive rate (more id-file reads) instead. False: shares follow the
    /// previous generation's rate and a full share closes early (the session 26 ring).
    pub equal_shares: bool,
    /// Width of the id-file buckets the keys are tagged with (review s27 B1), in µs; 0: no
    /// tags. A key recorded at `at` is tagged with the slot of `at / tag_us` inside its
    /// generation, so a lookup names the one bucket (not the generation's 5-6) to search.
    pub tag_us: i64,
}

impl Default for FilterConfig {
    fn default() -> Self {
        FilterConfig {
            bytes: 256 << 20,
            generations: 12,
            bits_per_key: 10,
            equal_shares: true,
            tag_us: 0,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RingError {
    #[error(
        "dedup_filter_bytes is {bytes}; it must be at least {min} (two 64-byte blocks per \
         generation and one more generation) and at most {max}"
    )]
    Bytes { bytes: u64, min: u64, max: u64 },
    #[error("the {0} bytes of dedup_filter_bytes could not be allocated")]
    Alloc(u64),
    #[error("dedup_filter_generations is {0}; it must be 1..={MAX_GENERATIONS}")]
    Generations(u32),
    #[error("dedup_filter_bits_per_id is {0}; it must be 1..={MAX_BITS_PER_KEY}")]
    BitsPerKey(u32),
    #[error("the filters' tag width is {0} µs; it must not be negative")]
    TagWidth(i64),
}

impl FilterConfig {
    /// The least `bytes` that `validate` accepts for these generations.
    pub fn min_bytes(&self) -> u64 {
        (u64::from(self.generations) + 1) * MIN_BLOCKS_PER_GENERATION * BLOCK_BYTES as u64
    }

    pub fn validate(&self) -> Result<(), RingError> {
        if self.generations == 0 || self.generations > MAX_GENERATIONS {
            return Err(RingError::Generations(self.generations));
        }
        if self.bits_per_key == 0 || self.bits_per_key > MAX_BITS_PER_KEY {
            return Err(RingError::BitsPerKey(self.bits_per_key));
        }
        if self.tag_us < 0 {
            return Err(RingError::TagWidth(self.tag_us));
        }
        let min =
            (u64::from(self.generations) + 1) * MIN_BLOCKS_PER_GENERATION * BLOCK_BYTES as u64;
        if self.bytes < min || self.bytes > MAX_FILTER_BYTES {
            return Err(RingError::Bytes {
                bytes: self.bytes,
                min,
                max: MAX_FILTER_BYTES,
            });
        }
        Ok(())
    }
}

/// What one generation covers. Public so the id files (one set per generation) and the
/// checkpoint can name and describe generations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation {
    /// Numbers grow by one per generation opened, from 0, and are never reused.
    pub number: u64,
    /// Entry time of its first id.
    pub opened_us: i64,
    /// Entry time of its newest id.
    pub last_us: i64,
    pub keys: u64,
    /// Ids it takes before it closes early.
    pub capacity: u64,
    pub closed: bool,
    /// The tag (bucket) of `opened_us`; a key's tag slot counts from it.
    pub first_tag: u64,
    /// The arena its bits are in (numbers grow by one per arena, from 0).
    arena: u64,
    first_block: usize,
    blocks: usize,
}

impl Generation {
    fn overlaps(&self, arena: u64, first: usize, blocks: usize) -> bool {
        self.arena == arena
            && self.first_block < first + blocks
            && first < self.first_block + self.blocks
    }

    /// Blocks of its filter (its size: generations of one ring may differ after a `grow`).
    pub fn blocks(&self) -> usize {
        self.blocks
    }
}

/// One allocation that generations are carved from, and the share of the node's allowance it
/// was drawn from (given back when the arena is dropped).
pub struct Arena {
    blocks: Box<[Block]>,
    draw: Option<FilterDraw>,
}

impl Arena {
    /// Allocates `config.bytes` (validated) and touches every page, so the memory is resident
    /// from the start and RSS does not grow as the filters fill; seconds for hundreds of MiB
    /// on a loaded host, which is why the broker does it on the spill writer's thread.
    pub fn new(config: &FilterConfig) -> Result<Arena, RingError> {
        config.validate()?;
        let n = usize::try_from(config.bytes / BLOCK_BYTES as u64)
            .map_err(|_| RingError::Alloc(config.bytes))?;
        let mut blocks = Vec::new();
        blocks
            .try_reserve_exact(n)
            .map_err(|_| RingError::Alloc(config.bytes))?;
        blocks.resize(n, [0u64; 8]);
        let mut blocks = blocks.into_boxed_slice();
        // Pages may be mapped lazily; a store the optimiser cannot prove redundant makes each
        // 4 KiB page resident now.
        for b in blocks.iter_mut().step_by(4096 / BLOCK_BYTES) {
            b[0] = std::hint::black_box(0);
        }
        Ok(Arena { blocks, draw: None })
    }

    /// The arena holds `draw` until it is dropped.
    pub fn with_draw(mut self, draw: FilterDraw) -> Arena {
        self.draw = Some(draw);
        self
    }

    pub fn bytes(&self) -> u64 {
        (self.blocks.len() * BLOCK_BYTES) as u64
    }
}

#[cfg(test)]
thread_local! {
    /// Bytes of arenas dropped on this thread: tests check that a group's lock holder does not
    /// free them (review s29 M1).
    pub static DROPPED_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
impl Drop for Arena {
    fn drop(&mut self) {
        let b = self.bytes();
        DROPPED_HERE.with(|d| d.set(d.get() + b));
    }
}

/// Counters of the ring since it was built; each event is also counted by the metric
/// `queen_dedup_window_shortened_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterStats {
    /// Generations closed because they reached their share before their time span.
    pub early_closes: u64,
    /// Generations dropped for room while some of their ids were still inside the window.
    pub evicted_in_window: u64,
    /// The newest entry time of the generations dropped while still inside the window
    /// (`i64::MIN`: none): the ring is no longer exact for ids at or before it, so a caller
    /// that needs the whole window searches its exact data for them (issue 12, H3).
    pub lost_through_us: i64,
}

impl Default for FilterStats {
    fn default() -> Self {
        FilterStats {
            early_closes: 0,
            evicted_in_window: 0,
            lost_through_us: i64::MIN,
        }
    }
}

pub struct GenerationRing {
    /// Oldest first; the back one takes new generations. Those before it stay while a live
    /// generation's bits are in them.
    arenas: VecDeque<Arena>,
    /// The number of `arenas[0]`.
    arena_base: u64,
    /// Handed in by `grow`: the next generation opened is carved from it.
    next_arena: Option<Arena>,
    /// Arenas freed and not yet taken by `take_freed`: dropping one unmaps a whole resident
    /// arena (up to half the allowance), which the caller does off its lock (review s29 M1).
    freed: Vec<Arena>,
    config: FilterConfig,
    k: u32,
    window_us: i64,
    /// Oldest first; the back one takes new ids unless it is closed.
    live: VecDeque<Generation>,
    next_number: u64,
    newest_us: i64,
    stats: FilterStats,
    /// Generations closed since `take_closed` (their bits never change again: they are what
    /// a start may read instead of the id files).
    closed_log: Vec<u64>,
}

/// What a persisted generation says of itself (`install`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedGeneration {
    pub opened_us: i64,
    pub last_us: i64,
    pub keys: u64,
}

impl GenerationRing {
    /// Allocates and touches every page of the filters, so the memory they cost is resident
    /// from the start and RSS does not grow as they fill. `window_us` is the longest dedup
    /// window (at least 1 µs is used).
    pub fn new(config: FilterConfig, window_us: i64) -> Result<Self, RingError> {
        let arena = Arena::new(&config)?;
        Ok(GenerationRing {
            arenas: VecDeque::from([arena]),
            arena_base: 0,
            next_arena: None,
            freed: Vec::new(),
            k: probes_for(config.bits_per_key),
            config,
            window_us: window_us.max(1),
            live: VecDeque::new(),
            next_number: 0,
            newest_us: i64::MIN,
            stats: FilterStats::default(),
            closed_log: Vec::new(),
        })
    }

    pub fn config(&self) -> FilterConfig {
        self.config
    }

    pub fn stats(&self) -> FilterStats {
        self.stats
    }

    /// Bytes of every arena held, the one handed in for the next generation too (the
    /// `dedup` pool counts them).
    pub fn allocated_bytes(&self) -> usize {
        self.arenas
            .iter()
            .chain(self.next_arena.as_ref())
            .chain(self.freed.iter())
            .map(|a| a.blocks.len() * BLOCK_BYTES)
            .sum()
    }

    /// Bytes of the arena that new generations are (or the next one will be) carved from.
    pub fn current_bytes(&self) -> u64 {
        self.next_arena
            .as_ref()
            .or(self.arenas.back())
            .map_or(0, |a| a.bytes())
    }

    /// Arenas held, the one waiting for the next generation included: more than one while
    /// generations of an older size are still inside the window.
    pub fn arenas(&self) -> usize {
        self.arenas.len() + usize::from(self.next_arena.is_some())
    }

    /// From the next generation opened on, generations are carved from `arena` (replacing one
    /// handed in before that is not used yet). The arenas before it are freed once their last
    /// generation has left the window. The caller allocates it, off any lock that matters.
    pub fn grow(&mut self, arena: Arena) {
        if let Some(unused) = self.next_arena.replace(arena) {
            self.freed.push(unused);
        }
    }

    /// The arenas freed since the last call, for the caller to drop off its lock (their
    /// draws go back to the allowance when they are dropped).
    pub fn take_freed(&mut self) -> Vec<Arena> {
        std::mem::take(&mut self.freed)
    }

    /// The current arena holds `draw` (the allowance its bytes came from) until it is freed.
    pub fn hold_draw(&mut self, draw: FilterDraw) {
        if let Some(a) = self.arenas.back_mut() {
            a.draw = Some(draw);
        }
    }

    /// The arena of the generations being opened now.
    fn current_blocks(&self) -> usize {
        self.arenas.back().map_or(0, |a| a.blocks.len())
    }

    fn current_arena(&self) -> u64 {
        self.arena_base + self.arenas.len().saturating_sub(1) as u64
    }

    /// The bits of `g` (in whichever arena holds them).
    fn filter(&self, g: &Generation) -> &[Block] {
        let a = (g.arena - self.arena_base) as usize;
        &self.arenas[a].blocks[g.first_block..g.first_block + g.blocks]
    }

    fn filter_mut(&mut self, arena: u64, first: usize, blocks: usize) -> &mut [Block] {
        let a = (arena - self.arena_base) as usize;
        &mut self.arenas[a].blocks[first..first + blocks]
    }

    /// Frees the arenas before the current one that no live generation uses.
    fn free_arenas(&mut self) {
        while self.arenas.len() > 1 && self.live.front().is_none_or(|g| g.arena != self.arena_base)
        {
            if let Some(a) = self.arenas.pop_front() {
                self.freed.push(a);
            }
            self.arena_base += 1;
        }
    }

    /// The generation numbered `number`, while it is live.
    pub fn generation(&self, number: u64) -> Option<&Generation> {
        self.live.iter().find(|g| g.number == number)
    }

    pub fn window_us(&self) -> i64 {
        self.window_us
    }

    /// Live generations, oldest first.
    pub fn generations(&self) -> impl DoubleEndedIterator<Item = &Generation> {
        self.live.iter()
    }

    /// The longest window changed (a queue was created, altered or deleted): generations
    /// opened from now on span 1/G of it, and expiry follows it at once.
    pub fn set_window(&mut self, window_us: i64) {
        self.window_us = window_us.max(1);
    }

    /// The tag of an entry time (the id-file bucket when tags are on, else 0).
    fn tag_of(&self, at_us: i64) -> u64 {
        if self.config.tag_us > 0 {
            (at_us.max(0) / self.config.tag_us) as u64
        } else {
            0
        }
    }

    /// Probes per key (k), a function of `bits_per_key`.
    pub fn probes(&self) -> u32 {
        self.k
    }

    /// The newest entry time given to the ring.
    pub fn newest_us(&self) -> i64 {
        self.newest_us
    }

    /// Blocks the next generation takes with equal shares (what a persisted one must have to
    /// be installed): carved from the arena handed in by a pending grow, if any, as `open`
    /// will (review s29 dedup L1).
    pub fn equal_share_blocks(&self) -> usize {
        let blocks = self
            .next_arena
            .as_ref()
            .map_or(self.current_blocks(), |a| a.blocks.len());
        (blocks as u64 / (u64::from(self.config.generations) + 1)).max(1) as usize
    }

    /// Numbers of the generations closed since the last call, oldest first.
    pub fn take_closed(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.closed_log)
    }

    /// The bits of a live generation.
    pub fn bits(&self, number: u64) -> Option<&[Block]> {
        self.generation(number).map(|g| self.filter(g))
    }

    /// Puts a persisted, closed generation back as the newest one (a start, instead of
    /// reading its ids). Refused (None) unless shares are equal and its bits are exactly one
    /// share, and unless it is not older than what the ring holds (entry times only grow).
    /// Every check is made before the ring is touched: a refused install changes nothing.
    pub fn install(&mut self, saved: SavedGeneration, bits: &[Block]) -> Option<u64> {
        if !self.config.equal_shares
            || bits.len() != self.equal_share_blocks()
            || saved.opened_us < self.newest_us
            || saved.last_us < saved.opened_us
        {
            return None;
        }
        self.newest_us = saved.last_us;
        self.expire(saved.last_us);
        if let Some(g) = self.live.back_mut() {
            if !g.closed {
                g.closed = true;
                self.closed_log.push(g.number);
            }
        }
        self.open(saved.opened_us);
        let tag = self.tag_of(saved.opened_us);
        let g = *self.live.back()?;
        // The size was checked above against the arena `open` carves from; a mismatch here
        // would be a bug, refused rather than a panic in the copy.
        debug_assert_eq!(g.blocks, bits.len());
        if g.blocks != bits.len() {
            return None;
        }
        self.filter_mut(g.arena, g.first_block, g.blocks)
            .copy_from_slice(bits);
        let g = self.live.back_mut()?;
        g.last_us = saved.last_us;
        g.keys = saved.keys;
        g.closed = true;
        g.first_tag = tag;
        Some(g.number)
    }

    /// Records `key` at `at_us` in the live generation `number` (a start putting back ids of
    /// a bucket an installed generation shares with one that could not be installed). False
    /// when that generation is gone or `at_us` lies outside its buckets.
    pub fn insert_into(&mut self, number: u64, at_us: i64, key: u64) -> bool {
        let tag = self.tag_of(at_us);
        let k = self.k;
        let last_tag = |g: &Generation, c: &FilterConfig| {
            if c.tag_us > 0 {
                (g.last_us.max(0) / c.tag_us) as u64
            } else {
                0
            }
        };
        let config = self.config;
        let Some(g) = self.live.iter().find(|g| g.number == number).copied() else {
            return false;
        };
        if tag < g.first_tag || tag > last_tag(&g, &config) {
            return false;
        }
        insert_tagged(
            self.filter_mut(g.arena, g.first_block, g.blocks),
            k,
            key,
            tag - g.first_tag,
        );
        true
    }

    /// Like `lookup`, but with the bucket: every (generation, tag) whose bits may hold `key`,
    /// newest generation first. One cache line per generation; the tags are tested inside it.
    pub fn lookup_tags(&self, key: u64, now_us: i64, window_us: i64, out: &mut Vec<(u64, u64)>) {
        let horizon = now_us.saturating_sub(window_us);
        for g in self.live.iter().rev().take_while(|g| g.last_us >= horizon) {
            let blocks = self.filter(g);
            let last = self.tag_of(g.last_us).max(g.first_tag);
            for tag in g.first_tag..=last {
                if contains_tagged(blocks, self.k, key, tag - g.first_tag) {
                    out.push((g.number, tag));
                }
            }
        }
    }

    fn span_us(&self) -> i64 {
        (self.window_us / i64::from(self.config.generations)).max(1)
    }

    /// Records `key`, pushed by an entry applied at `at_us`. Entry times only grow; an older
    /// time is taken as the newest seen, so a replay builds the same ring.
    pub fn insert(&mut self, at_us: i64, key: u64) {
        let at = at_us.max(self.newest_us);
        self.newest_us = at;
        self.expire(at);
        let span = self.span_us();
        let need_new = match self.live.back_mut() {
            None => true,
            Some(g) if g.closed => true,
            Some(g) if at.saturating_sub(g.opened_us) >= span => {
                g.closed = true;
                self.closed_log.push(g.number);
                true
            }
            Some(g) if g.keys >= g.capacity => {
                g.closed = true;
                self.closed_log.push(g.number);
                self.stats.early_closes += 1;
                metrics::counter!("queen_dedup_window_shortened_total", "reason" => "share")
                    .increment(1);
                true
            }
            Some(_) => false,
        };
        if need_new {
            self.open(at);
        }
        let k = self.k;
        let tag = self.tag_of(at);
        if let Some(g) = self.live.back().copied() {
            insert_tagged(
                self.filter_mut(g.arena, g.first_block, g.blocks),
                k,
                key,
                tag.saturating_sub(g.first_tag),
            );
        }
        if let Some(g) = self.live.back_mut() {
            g.keys += 1;
            g.last_us = at;
        }
    }

    /// Drops the generations whose newest id is older than the window at `now_us`.
    pub fn expire(&mut self, now_us: i64) {
        let horizon = now_us.saturating_sub(self.window_us);
        while self.live.front().is_some_and(|g| g.last_us < horizon) {
            self.live.pop_front();
        }
        self.free_arenas();
    }

    /// Numbers of the generations, newest first, that may hold `key` among those with an id
    /// inside `window_us` (a queue's own window) of `now_us`. Empty means the key was not
    /// recorded inside that window (as far as the ring still covers it: see `stats`).
    pub fn lookup(&self, key: u64, now_us: i64, window_us: i64) -> impl Iterator<Item = u64> + '_ {
        let horizon = now_us.saturating_sub(window_us);
        self.live
            .iter()
            .rev()
            .take_while(move |g| g.last_us >= horizon)
            .filter(move |g| {
                let blocks = self.filter(g);
                if self.config.tag_us > 0 {
                    let last = self.tag_of(g.last_us).max(g.first_tag);
                    (g.first_tag..=last)
                        .any(|t| contains_tagged(blocks, self.k, key, t - g.first_tag))
                } else {
                    contains(blocks, self.k, key)
                }
            })
            .map(|g| g.number)
    }

    pub fn may_contain(&self, key: u64, now_us: i64, window_us: i64) -> bool {
        self.lookup(key, now_us, window_us).next().is_some()
    }

    /// Blocks for a generation opened at `at_us`: the previous generation's rate over one span,
    /// with headroom, at the configured bits per id, at most twice the previous share; never
    /// less than an equal share of the allocation among G + 1 generations (the window and the
    /// open one), never more than half.
    fn share(&self, at_us: i64) -> usize {
        let total = self.current_blocks() as u64;
        let equal = total / (u64::from(self.config.generations) + 1);
        if self.config.equal_shares {
            return equal.max(1) as usize;
        }
        let wanted = match self.live.back() {
            Some(prev) => {
                let lasted = (at_us.min(prev.opened_us.saturating_add(self.span_us()))
                    - prev.opened_us)
                    .max(1) as u128;
                let ids = u128::from(prev.keys) * self.span_us() as u128 / lasted
                    * u128::from(HEADROOM_QUARTERS)
                    / 4;
                let bits = ids * u128::from(self.config.bits_per_key);
                let blocks =
                    u64::try_from(bits.div_ceil(BLOCK_BYTES as u128 * 8)).unwrap_or(u64::MAX);
                // At most twice the previous share: ids of one entry share one time, so a
                // single big batch reads as an endless rate and must not take half the ring.
                blocks.min(2 * prev.blocks as u64)
            }
            None => 0,
        };
        wanted.clamp(equal.max(1), (total / 2).max(1)) as usize
    }

    fn open(&mut self, at_us: i64) {
        let grown = self.next_arena.take();
        let switched = grown.is_some();
        if let Some(a) = grown {
            self.arenas.push_back(a);
        }
        let arena = self.current_arena();
        let blocks = self.share(at_us);
        let total = self.current_blocks();
        let mut first = match self.live.back() {
            Some(g) if !switched && g.arena == arena => g.first_block + g.blocks,
            _ => 0,
        };
        if first + blocks > total {
            first = 0;
        }
        let horizon = at_us.saturating_sub(self.window_us);
        while self.live.iter().any(|g| g.overlaps(arena, first, blocks)) {
            let Some(old) = self.live.pop_front() else {
                break;
            };
            if old.last_us >= horizon {
                self.stats.evicted_in_window += 1;
                self.stats.lost_through_us = self.stats.lost_through_us.max(old.last_us);
                metrics::counter!("queen_dedup_window_shortened_total", "reason" => "evicted")
                    .increment(1);
            }
        }
        self.free_arenas();
        self.filter_mut(arena, first, blocks).fill([0; 8]);
        let capacity = if self.config.equal_shares {
            u64::MAX
        } else {
            (blocks as u64 * BLOCK_BYTES as u64 * 8) / u64::from(self.config.bits_per_key)
        };
        self.live.push_back(Generation {
            number: self.next_number,
            opened_us: at_us,
            last_us: at_us,
            keys: 0,
            capacity: capacity.max(1),
            closed: false,
            first_tag: self.tag_of(at_us),
            arena,
            first_block: first,
            blocks,
        });
        self.next_number += 1;
    }
}

#[cfg(test)]
#[path = "ring_tests.rs"]
mod tests;
