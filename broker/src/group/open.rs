//! Opening a group's storage: the state store, the checkpoint and the log, checked against
//! what the group had acknowledged (docs/storage-format.md, "Start-up checks"), and the
//! operator's `accept_data_loss` when something acknowledged is gone.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Context};
use queenmq_storage::{
    Checkpoint, Generation, GenerationHead, IoBackend, LogOptions, RecoveryReport, SegmentLog,
    StateStore, StorageError,
};

use crate::config::Config;
use crate::engine::Shared;
use crate::log_backing;
use crate::state::{decode_state, encode_state, State};

/// The redb file of checkpoints and Raft metadata, in the data dir.
pub const STATE_FILE: &str = "state.redb";

/// How the refusals end: what the operator can do about them.
const REFUSAL_HINT: &str = "Restore the data directory from a backup or replica, or start once \
    with accept_data_loss=true (QUEEN_ACCEPT_DATA_LOSS=true, --accept-data-loss) to drop what \
    is missing";

/// Refuses to start over `what` (a sentence naming what is missing), unless the operator
/// accepted the loss: then it is logged once at ERROR and start-up goes on.
fn refuse_or_accept(accept: bool, what: &str) -> anyhow::Result<()> {
    if !accept {
        return Err(anyhow!("refusing to start: {what}. {REFUSAL_HINT}"));
    }
    tracing::error!("accept_data_loss: starting anyway, dropping what is missing: {what}");
    Ok(())
}

/// The storage a node starts from, checked against what it had acknowledged.
pub struct Opened {
    pub log: SegmentLog,
    pub report: RecoveryReport,
    pub store: StateStore,
    pub state: State,
    /// How far the log may be reclaimed while the checkpoint the state was loaded from is
    /// the older generation kept (`engine::reclaim`); None: nowhere yet.
    pub reclaim_bound: Option<u64>,
    /// The encoded size of the largest stored checkpoint generation that verifies, 0 for
    /// none: what the tenant's next checkpoint is expected to need (the disk gate's loans).
    pub checkpoint_bytes: u64,
}

/// Opens the state store, then the log with every index Raft or the checkpoint says was
/// acknowledged as `durable_through`, so that recovery refuses rather than drops it.
/// docs/storage-format.md ("Start-up checks") is the rule this implements. `log_backend`
/// replaces the files of `<data_dir>/log` (tests: a backend that fails on demand);
/// `store_cache` is the state store's page cache.
pub fn open_storage(
    cfg: &Config,
    log_backend: Option<Arc<dyn IoBackend>>,
    store_cache: usize,
) -> anyhow::Result<Opened> {
    let accept = cfg.accept_data_loss;
    let log_dir = cfg.data_dir.join("log");
    let store = open_store(&cfg.data_dir, &log_dir, accept, store_cache)?;
    // Before the log is looked at: a crash between an install's two renames leaves no `log/`
    // (docs/storage-format.md "Raft snapshot").
    queenmq_storage::DiskDataDir::new(&cfg.data_dir)
        .map_err(|e| StorageError::Io {
            op: "open the data directory",
            path: cfg.data_dir.clone(),
            source: e,
        })
        .and_then(|dir| queenmq_storage::finish_interrupted_install(&dir, &store))
        .map_err(|e| anyhow!("finishing a snapshot install in {STATE_FILE}: {e}"))?;
    let log_present = log_backend.is_some() || log_dir.is_dir();
    let raft = queenmq_raft::read_persisted(&store)
        .map_err(|e| anyhow!("reading the raft metadata in {STATE_FILE}: {e}"))?;
    let started = Instant::now();
    let found = Found::read(&store);
    let cp_index = found.applied_index();
    let durable_through = raft.committed.max(cp_index).unwrap_or(0);
    // A snapshot whose state names no log record carries none (its floor is A + 1), so the
    // install leaves an empty log that starts past A. Nothing acknowledged is missing from it
    // when a checkpoint holds every acknowledged index and Raft's horizon is at or past it
    // (review s29 snap H2: every reopen refused "the log ends at index 0").
    let covered = |at: Option<u64>| at.is_some_and(|i| i >= durable_through);
    let horizon = (covered(cp_index) && covered(raft.purged))
        .then_some(raft.purged)
        .flatten();
    let log_durable = if horizon.is_some() {
        0
    } else {
        durable_through
    };
    let checkpoint_bytes = found.state_len();
    if !log_present {
        let mut held = Vec::new();
        if raft.vote {
            held.push("a raft vote".to_owned());
        }
        if let Some(c) = raft.committed {
            held.push(format!("committed index {c}"));
        }
        if let Some(i) = cp_index {
            held.push(format!("a checkpoint at index {i}"));
        }
        if found.any_unusable() {
            held.push("a checkpoint".to_owned());
        }
        if !held.is_empty() {
            refuse_or_accept(
                accept,
                &format!(
                    "{} holds {} but the log directory {} is missing, so log records 1..={durable_through} are lost",
                    cfg.data_dir.join(STATE_FILE).display(),
                    held.join(", "),
                    log_dir.display()
                ),
            )?;
        }
    }
    let opts = LogOptions {
        segment_bytes: cfg.segment_bytes,
        durable_through: log_durable,
        accept_data_loss: accept,
        ..LogOptions::default()
    };
    // The log's scan (every record's CRC32C) and the checkpoint's read and decode touch
    // different files and memory: on two threads a start takes the longer of the two, not
    // their sum (session 35: 10 GB of log and a 0.5 GB checkpoint).
    let log_dir_ref = &log_dir;
    let (opened_log, chosen, timing) = std::thread::scope(|scope| {
        let log_job = scope.spawn(move || {
            let at = Instant::now();
            let opened = match log_backend {
                Some(backend) => SegmentLog::open_with_backend(backend, opts),
                None => SegmentLog::open(log_dir_ref, opts),
            };
            (opened, at.elapsed())
        });
        let at = Instant::now();
        let chosen = found.choose(&store);
        let decoded = at.elapsed();
        match log_job.join() {
            Ok((opened, scanned)) => (opened, chosen, (scanned, decoded)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    let (log, report) =
        opened_log.with_context(|| format!("opening the log in {}", cfg.data_dir.display()))?;
    tracing::info!(
        log_scan_ms = timing.0.as_millis() as u64,
        checkpoint_read_and_decode_ms = timing.1.as_millis() as u64,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "log scanned and checkpoint decoded"
    );
    let state = load_chosen(chosen, &store, &log, &log_dir, accept, horizon)?;
    let reclaim_bound = state.applied.and_then(|(applied, _)| {
        crate::engine::reclaim::reclaimable_upto(applied, state.run_floor.lowest())
    });
    if let (true, Some(first)) = (accept, log.first_index()) {
        if first > 1 {
            let Some((applied_index, applied_term)) = state.applied else {
                // Replaying a log that starts past its beginning onto an empty state would
                // build a state that never existed (its entries name queues and partitions
                // created in the lost ones): accepting the loss cannot help here.
                return Err(anyhow!(
                    "refusing to start: the log in {} starts at index {first} and there is no \
                     usable checkpoint, so the state cannot be rebuilt even with \
                     accept_data_loss; restore the data directory from a backup, or move it \
                     away to start empty",
                    log_dir.display()
                ));
            };
            // A checkpoint kept over a log whose start is gone (accepted above): Raft must
            // read the log from where it now starts. The horizon never passes what was
            // applied (openraft orders log ids by term first).
            let term = if applied_index.checked_add(1) == Some(first) {
                applied_term
            } else {
                log.term_of(first).unwrap_or(0).min(applied_term)
            };
            queenmq_raft::accept_missing_log_start(&store, first, term)
                .map_err(|e| anyhow!("{STATE_FILE}: {e}"))?;
        }
    }
    let mut state = state;
    let at = Instant::now();
    state.txn_spill = Some(Box::new(open_txn_spill(cfg, &state)?));
    tracing::info!(
        elapsed_ms = at.elapsed().as_millis() as u64,
        "transaction-id index opened"
    );
    Ok(Opened {
        log,
        report,
        store,
        state,
        reclaim_bound,
        checkpoint_bytes,
    })
}

/// The id files of the transaction-id index (`<data_dir>/ids`), with the window filters
/// rebuilt from them before the first push is answered. A damaged file is dropped with a
/// warning (crate::id_store), never a refusal to start.
fn open_txn_spill(cfg: &Config, state: &State) -> anyhow::Result<queenmq_engine::state::TxnSpill> {
    let store = crate::id_store::DiskIdStore::open(&cfg.data_dir)
        .map_err(|e| anyhow!("opening the id files: {e}"))?;
    let bytes = match cfg.dedup_filter_bytes {
        0 => crate::memory::Memory::default_dedup_filter_bytes(cfg.memory_limit_bytes),
        b => b,
    };
    let filter = queenmq_engine::dedup_filter::FilterConfig {
        bytes,
        ..Default::default()
    };
    Ok(queenmq_engine::state::TxnSpill::open_shared(
        Box::new(store),
        usize::try_from(crate::memory::Memory::dedup_hot_ids(
            cfg.dedup_hot_ids,
            cfg.memory_limit_bytes,
        ))
        .unwrap_or(usize::MAX),
        filter,
        &queenmq_engine::dedup_filter::NODE_FILTERS,
        state.txn_keep_us(),
        state.last_now_us,
    ))
}

/// Opens `state.redb`. If redb cannot open it (a damaged file) and the log still starts at
/// its first index (0, or 1), nothing is lost by rebuilding: the file is moved aside and a new one is created.
fn open_store(
    data_dir: &Path,
    log_dir: &Path,
    accept: bool,
    cache: usize,
) -> anyhow::Result<StateStore> {
    let path = data_dir.join(STATE_FILE);
    // redb 4.6 can panic (unreachable code in its btree cursor) on some damaged pages while
    // opening; that is a damaged file like any other, not a reason to die without a word.
    let opened = std::panic::catch_unwind(|| StateStore::open_with_cache(&path, cache))
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            Err(StorageError::CorruptCheckpoint {
                reason: format!("redb panicked while opening the file: {what}"),
            })
        });
    let error = match opened {
        Ok(store) => return Ok(store),
        // Open elsewhere (another group or process on these files): never damage, so never
        // moved aside — that would throw away the vote and committed index recovery needs.
        Err(e) if e.is_in_use() => {
            return Err(anyhow!(
                "{} is open elsewhere ({e}); refusing to open it twice",
                path.display()
            ))
        }
        Err(e) if path.is_file() => e,
        Err(e) => return Err(anyhow!("opening {}: {e}", path.display())),
    };
    // openraft's first entry (the initial membership) has index 0; 1 is accepted too.
    let origin = [
        "seg-00000000000000000000.qlog",
        "seg-00000000000000000001.qlog",
    ];
    if !origin.iter().any(|name| log_dir.join(name).is_file()) {
        refuse_or_accept(
            accept,
            &format!(
                "{} cannot be opened ({error}) and the log in {} no longer starts at its first \
                 index ({} is missing), so the state it held cannot be rebuilt",
                path.display(),
                log_dir.display(),
                origin[0]
            ),
        )?;
    }
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let aside = data_dir.join(format!("{STATE_FILE}.corrupt-{unix}"));
    std::fs::rename(&path, &aside)
        .and_then(|()| queenmq_storage::sync_parent(&path))
        .with_context(|| format!("moving {} aside to {}", path.display(), aside.display()))?;
    tracing::warn!(
        "{} cannot be opened ({error}); moved it to {} and rebuilding the state from the log, \
         which still starts at its first index: nothing is lost",
        path.display(),
        aside.display()
    );
    StateStore::open_with_cache(&path, cache)
        .with_context(|| format!("creating {}", path.display()))
}

/// A checkpoint that verifies and decodes, from the newest generation that does.
struct Usable {
    cp: Checkpoint,
    state: State,
}

/// The checkpoint generations as a start finds them, before their states are read.
enum Found {
    /// Headers of the current version, whose own CRC32C vouches for their applied index:
    /// the states are read one at a time, newest first, and the older only if the newer
    /// fails.
    Heads(Vec<GenerationHead>),
    /// A version 1 header (whose index only its verified state vouches for) or headers that
    /// could not be read: every generation read whole, as before session 35.
    Whole(Result<Vec<Generation>, StorageError>),
}

impl Found {
    fn read(store: &StateStore) -> Self {
        match store.generation_heads() {
            Ok(heads)
                if heads
                    .iter()
                    .all(|h| h.current_version || h.applied_index.is_none()) =>
            {
                Found::Heads(heads)
            }
            Ok(_) => Found::Whole(store.load_generations()),
            Err(e) => Found::Whole(Err(e)),
        }
    }

    /// The highest index a checkpoint vouches for: what the group had applied, and so
    /// acknowledged, at least.
    fn applied_index(&self) -> Option<u64> {
        match self {
            Found::Heads(heads) => heads.iter().filter_map(|h| h.applied_index).max(),
            Found::Whole(gens) => gens.as_ref().ok().and_then(|gens| {
                gens.iter()
                    .filter_map(|g| g.checkpoint.as_ref().ok().map(|cp| cp.applied_index))
                    .max()
            }),
        }
    }

    /// The largest state a generation holds, bytes (0 with none).
    fn state_len(&self) -> u64 {
        match self {
            Found::Heads(heads) => heads.iter().filter_map(|h| h.state_len).max(),
            Found::Whole(gens) => gens.as_ref().ok().and_then(|gens| {
                gens.iter()
                    .filter_map(|g| g.checkpoint.as_ref().ok().map(|cp| cp.state.len() as u64))
                    .max()
            }),
        }
        .unwrap_or(0)
    }

    /// Whether something checkpoint-like is there that does not name its index.
    fn any_unusable(&self) -> bool {
        match self {
            Found::Heads(heads) => heads.iter().any(|h| h.applied_index.is_none()),
            Found::Whole(gens) => gens
                .as_ref()
                .map_or(true, |gens| gens.iter().any(|g| g.checkpoint.is_err())),
        }
    }

    /// The newest generation that verifies and decodes, and why each newer one was passed
    /// over; with `Heads`, a state is read only when every newer one failed.
    fn choose(self, store: &StateStore) -> (Option<(usize, Usable)>, Vec<String>) {
        let heads = match self {
            Found::Whole(Ok(gens)) => return newest_usable(gens),
            Found::Whole(Err(e)) => {
                return (None, vec![format!("the checkpoints cannot be read ({e})")])
            }
            Found::Heads(heads) => heads,
        };
        let mut passed = Vec::new();
        for head in heads {
            match store.load_generation(head.slot) {
                Ok(Some(g)) => {
                    let (usable, why) = newest_usable(vec![g]);
                    passed.extend(why);
                    if usable.is_some() {
                        return (usable, passed);
                    }
                }
                Ok(None) => {}
                Err(e) => passed.push(format!(
                    "the checkpoint in slot {} cannot be read ({e})",
                    head.slot
                )),
            }
        }
        (None, passed)
    }
}

/// The applied index of the generation a start loads, and why newer ones were passed over.
#[cfg(test)]
pub(super) fn chosen_index(store: &StateStore) -> (Option<u64>, Vec<String>) {
    let (usable, passed) = Found::read(store).choose(store);
    (usable.map(|(_, u)| u.cp.applied_index), passed)
}

/// The newest generation that verifies (length, CRC32C) and decodes, the slot it is in, and
/// why each newer one was passed over.
fn newest_usable(gens: Vec<Generation>) -> (Option<(usize, Usable)>, Vec<String>) {
    let mut passed = Vec::new();
    for g in gens {
        let what = match g.applied_index {
            Some(i) => format!("the checkpoint at index {i} (slot {})", g.slot),
            None => format!("the checkpoint in slot {}", g.slot),
        };
        match g.checkpoint {
            Ok(cp) => match decode_state(&cp.state) {
                Ok(state) => return (Some((g.slot, Usable { cp, state })), passed),
                Err(e) => passed.push(format!("{what} does not decode ({e})")),
            },
            Err(e) => passed.push(format!("{what} is unreadable ({e})")),
        }
    }
    (None, passed)
}

/// Loads the newest usable checkpoint generation, falling back to the older one (logged at
/// ERROR) when the newer does not verify or decode; the log is never reclaimed past what the
/// older one needs. One the log cannot back (ahead of its end, with a gap before its start,
/// or with runs pointing below its start) is acknowledged state that is gone: refused unless
/// accepted. With no usable generation, the state is rebuilt from the log when the log still
/// starts at its first index (nothing lost).
#[cfg(test)]
pub(super) fn load_state(
    generations: Result<Vec<Generation>, StorageError>,
    store: &StateStore,
    log: &SegmentLog,
    log_dir: &Path,
    accept: bool,
    horizon: Option<u64>,
) -> anyhow::Result<State> {
    let chosen = match generations {
        Ok(gens) => newest_usable(gens),
        Err(e) => (None, vec![format!("the checkpoints cannot be read ({e})")]),
    };
    load_chosen(chosen, store, log, log_dir, accept, horizon)
}

/// `load_state` with the generation already chosen: the usable one and why each newer one
/// was passed over.
fn load_chosen(
    chosen: (Option<(usize, Usable)>, Vec<String>),
    store: &StateStore,
    log: &SegmentLog,
    log_dir: &Path,
    accept: bool,
    horizon: Option<u64>,
) -> anyhow::Result<State> {
    // Raft's purge horizon, where it covers every acknowledged index, ends the log as Raft
    // sees it (openraft's last log id is then the horizon): an install that carried no
    // records leaves an empty log past it (review s29 snap H2).
    let last = log.last().map_or(0, |(i, _)| i).max(horizon.unwrap_or(0));
    let first = log.first_index();
    let (usable, passed) = chosen;
    let (cp, st) = match usable {
        Some((slot, Usable { cp, state })) => {
            if !passed.is_empty() {
                tracing::error!(
                    "{}; falling back to the older checkpoint at index {} in {STATE_FILE}: the \
                     log keeps every record after it, so nothing is lost, but look at the disk",
                    passed.join("; "),
                    cp.applied_index
                );
            }
            store.keep(slot);
            (cp, state)
        }
        None if passed.is_empty() => {
            if let Some(what) = log_backing::missing(&State::default(), false, first, log_dir) {
                refuse_or_accept(accept, &what)?;
            }
            return Ok(State::default());
        }
        // openraft's first entry has index 0; a log starting there (or at 1) is whole.
        None if first.is_none_or(|f| f <= 1) => {
            tracing::warn!(
                "no checkpoint in {STATE_FILE} is usable ({}); rebuilding the state from the \
                 log, which still starts at index {}: nothing is lost",
                passed.join("; "),
                first.unwrap_or(1)
            );
            return Ok(State::default());
        }
        None => {
            refuse_or_accept(
                accept,
                &format!(
                    "no checkpoint in {STATE_FILE} is usable ({}) and the log starts at index \
                     {}, so the state of records 0..={} cannot be rebuilt",
                    passed.join("; "),
                    first.unwrap_or(0),
                    first.unwrap_or(1).saturating_sub(1)
                ),
            )?;
            return Ok(State::default());
        }
    };
    let gap_before = first.is_some_and(|f| f > cp.applied_index.saturating_add(1));
    if cp.applied_index > last || gap_before {
        refuse_or_accept(
            accept,
            &format!(
                "the checkpoint in {STATE_FILE} is at index {} but the log holds {}: records \
                 {}..={} are missing",
                cp.applied_index,
                match first {
                    Some(f) => format!("{f}..={last}"),
                    None => "nothing".to_owned(),
                },
                if gap_before {
                    cp.applied_index + 1
                } else {
                    last + 1
                },
                if gap_before {
                    first.unwrap_or(1).saturating_sub(1)
                } else {
                    cp.applied_index
                }
            ),
        )?;
        return Ok(State::default());
    }
    let mut st = st;
    if let Some(what) = log_backing::missing(&st, true, first, log_dir) {
        // Accepted, the checkpoint is kept: rebuilding from a log without its start cannot
        // work (Raft replays from index 0), and the state past the missing records is intact.
        // The messages in them are forgotten once the log is replayed (forget_lost_messages).
        refuse_or_accept(
            accept,
            &format!(
                "the checkpoint in {STATE_FILE} at index {} cannot be served whole (the \
                 messages in the missing records are gone): {what}",
                cp.applied_index
            ),
        )?;
    }
    st.applied = Some((cp.applied_index, cp.applied_term));
    tracing::info!(index = cp.applied_index, "checkpoint loaded");
    Ok(st)
}

/// Partitions named one by one in the ERROR log when lost messages are forgotten; the rest
/// are summed up in one line (a million partitions must not mean a million lines).
const FORGOTTEN_LINES: usize = 100;

/// Once a loss is accepted and the log replayed, forgets the messages whose log records are
/// gone (state/forget.rs: no run may point below the log's start, no cursor stay below what
/// is held, or pops of the partition fail for ever), logs what at ERROR, and checkpoints the
/// repaired state before serving, so later starts find nothing missing and need no option.
pub fn forget_lost_messages(
    shared: &Shared,
    store: &StateStore,
    log_first: u64,
) -> anyhow::Result<()> {
    let (blob, applied) = {
        let mut st = shared.lock();
        let gone = st.forget_runs_below(log_first);
        if gone.is_empty() {
            return Ok(());
        }
        for f in gone.iter().take(FORGOTTEN_LINES) {
            let cursors = if f.groups.is_empty() {
                "no cursor stood on them".to_owned()
            } else {
                format!(
                    "the cursors of groups {} moved to offset {}",
                    f.groups.join(", "),
                    f.to
                )
            };
            tracing::error!(
                "accept_data_loss: forgot {} messages, offsets {}..={}, of partition '{}' of \
                 queue '{}': their log records are below the log's first index {log_first}; \
                 {cursors}",
                f.count(),
                f.from,
                f.to.saturating_sub(1),
                f.partition,
                f.queue
            );
        }
        let total: u64 = gone.iter().map(|f| f.count()).fold(0, u64::saturating_add);
        tracing::error!(
            "accept_data_loss: forgot {total} messages in {} partitions{}",
            gone.len(),
            if gone.len() > FORGOTTEN_LINES {
                format!(" ({} not named above)", gone.len() - FORGOTTEN_LINES)
            } else {
                String::new()
            }
        );
        let applied = st.applied.ok_or_else(|| {
            anyhow!(
                "forgot lost messages in a state that applied no log entry: nothing to checkpoint"
            )
        })?;
        (encode_state(&st), applied)
    };
    store
        .save_checkpoint(&Checkpoint {
            applied_index: applied.0,
            applied_term: applied.1,
            state: blob,
        })
        .map_err(|e| {
            anyhow!("checkpointing the state without the forgotten messages into {STATE_FILE}: {e}")
        })?;
    tracing::info!(
        index = applied.0,
        "checkpoint written without the forgotten messages: later starts need no accept_data_loss"
    );
    Ok(())
}
