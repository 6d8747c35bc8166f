//! The hosted records of a cluster member (`cluster_tenant_groups`, docs/cluster.md
//! "Tenants"): `<data_dir>/tenants-hosted/<tenant>` says this node applied the committed
//! declaration of `tenant` (effect 67) and with which voters its group was founded. Written
//! durably (temporary file fsynced, renamed, directory fsynced) before the group is opened, so
//! a group is never opened for a declaration a crash could forget; at a restart these records,
//! not the directories under `<data_dir>/tenants`, say which groups to open. A record that
//! does not read stops the start (the operator must act), since guessing a membership could
//! found a second group.
//!
//! A record is marked `opened` (a third line) by the group's first start here, once its
//! `state.redb` is created and its name fsynced and before Raft starts, so before any vote
//! (`cluster_member::Member::start`): from then on a tenant directory without its
//! `state.redb` is a lost one (its vote forgotten), and the group restarts joining
//! (`cluster_member::GroupFiles::tenant_lost`), never founding or voting, as a wiped
//! `default` member started with `cluster_join` does. A first open that failed before the
//! store stood leaves the record unmarked, so the preferred voter still founds at the next try.
//!
//! A node rejoining with `cluster_join` rebuilds its records by replaying the `default` log;
//! a declaration at or below its joining horizon (`queenmq_raft::join_horizon`) may predate
//! the wipe, and its group opens joining (`Declarations::applied`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use queenmq_engine::entry_tenants::check;
use queenmq_protocol::check_tenant_name;

/// The directory below the data dir that holds the hosted records.
pub const HOSTED_DIR: &str = "tenants-hosted";
/// A record's first line: its format and version.
const HEADER: &str = "queen-tenant-hosted 1";
/// The optional third line: the group was opened here once.
const OPENED: &str = "opened";
/// A record is two or three short lines: anything longer is not one.
const MAX_RECORD_BYTES: u64 = 4096;
/// The suffix of a record being written; one left by a crash is removed at the next read.
const TMP_SUFFIX: &str = ".tmp";

/// What `record` found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The record is written now, with these voters.
    New(Vec<u64>),
    /// A record stood already: the first committed declaration wins, whatever a later one
    /// named (a second declaration of a tenant is a no-op on every node alike).
    Existing(Vec<u64>),
}

impl Recorded {
    pub fn voters(&self) -> &[u64] {
        match self {
            Recorded::New(v) | Recorded::Existing(v) => v,
        }
    }
}

fn path_of(data_dir: &Path, tenant: &str) -> PathBuf {
    data_dir.join(HOSTED_DIR).join(tenant)
}

/// A record as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosted {
    pub voters: Vec<u64>,
    /// The group was opened here once (marked before that open).
    pub opened: bool,
}

fn render(voters: &[u64], opened: bool) -> String {
    let ids: Vec<String> = voters.iter().map(u64::to_string).collect();
    let mark = if opened { "opened\n" } else { "" };
    format!("{HEADER}\nvoters={}\n{mark}", ids.join(","))
}

fn parse(path: &Path, text: &str) -> anyhow::Result<Hosted> {
    let bad = |why: &str| {
        anyhow!(
            "{} is not a tenant's hosted record ({why}); refusing to start: restore it from \
             another node's {HOSTED_DIR}/ (docs/cluster.md \"Tenants\")",
            path.display()
        )
    };
    let mut lines = text.split('\n');
    if lines.next() != Some(HEADER) {
        return Err(bad("its first line is not the header"));
    }
    let list = lines
        .next()
        .and_then(|l| l.strip_prefix("voters="))
        .ok_or_else(|| bad("no voters line"))?;
    let opened = match (lines.next(), lines.next(), lines.next()) {
        (Some(""), None, _) => false,
        (Some(OPENED), Some(""), None) => true,
        _ => return Err(bad("text after the voters line")),
    };
    let voters = list
        .split(',')
        .map(|id| {
            id.parse::<u64>()
                .map_err(|_| bad("a voter id is not a number"))
        })
        .collect::<anyhow::Result<Vec<u64>>>()?;
    let tenant = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    check(tenant, &voters).map_err(|e| bad(&e))?;
    Ok(Hosted { voters, opened })
}

/// The voters `tenant`'s record names, if this node holds one.
pub fn read(data_dir: &Path, tenant: &str) -> anyhow::Result<Option<Vec<u64>>> {
    Ok(read_hosted(data_dir, tenant)?.map(|h| h.voters))
}

/// `tenant`'s record, if this node holds one.
pub fn read_hosted(data_dir: &Path, tenant: &str) -> anyhow::Result<Option<Hosted>> {
    check_tenant_name(tenant).map_err(|e| anyhow!("{e}"))?;
    let path = path_of(data_dir, tenant);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    let mut text = String::new();
    // The length is bounded before the read: a huge file is refused, never loaded.
    let len = file
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    if len > MAX_RECORD_BYTES {
        return Err(anyhow!(
            "{} is {len} bytes, not a tenant's hosted record; refusing to start",
            path.display()
        ));
    }
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_RECORD_BYTES), &mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    parse(&path, &text).map(Some)
}

/// Removes the temporary files a crash left (their records were never renamed into place, so
/// no group was opened for them). Only at the process's start, before any group opens: a
/// temporary file seen later may be one a declaration's apply or a group's start is still
/// writing, and removing it would fail that writer's rename (review s31 member H1).
pub fn remove_leftovers(data_dir: &Path) -> anyhow::Result<()> {
    let dir = data_dir.join(HOSTED_DIR);
    let Some(entries) = super::dir_listing::entries_if_any(&dir)? else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        if entry.file_name().to_string_lossy().ends_with(TMP_SUFFIX) {
            std::fs::remove_file(entry.path())
                .with_context(|| format!("removing {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Every hosted record, in tenant order. Read only: any caller (a membership route, the
/// `default` open) may run while a record is written, so a temporary file is skipped, never
/// removed (its writer renames it; a crash's leftover goes at start, `remove_leftovers`). A
/// name that is not a tenant's is refused (something else wrote there).
pub fn read_all(data_dir: &Path) -> anyhow::Result<Vec<(String, Vec<u64>)>> {
    let dir = data_dir.join(HOSTED_DIR);
    let Some(entries) = super::dir_listing::entries_if_any(&dir)? else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(TMP_SUFFIX) {
            continue;
        }
        if check_tenant_name(&name).is_err() || name == queenmq_protocol::DEFAULT_TENANT {
            return Err(anyhow!(
                "{} is not a tenant's hosted record; refusing to start: move it out of {}",
                entry.path().display(),
                dir.display()
            ));
        }
        names.push(name);
    }
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let voters = read(data_dir, &name)?
            .ok_or_else(|| anyhow!("{} vanished while it was read", dir.join(&name).display()))?;
        out.push((name, voters));
    }
    Ok(out)
}

/// Records that this node applied the declaration of `tenant` with `voters`, durably, unless
/// a record stands already (the first declaration wins). Blocking: call it off the runtime or
/// where the caller may block (the Raft apply path).
pub fn record(data_dir: &Path, tenant: &str, voters: &[u64]) -> anyhow::Result<Recorded> {
    check(tenant, voters).map_err(|e| anyhow!("declaration of {tenant:?}: {e}"))?;
    if let Some(existing) = read(data_dir, tenant)? {
        return Ok(Recorded::Existing(existing));
    }
    write(data_dir, tenant, voters, false)?;
    Ok(Recorded::New(voters.to_vec()))
}

/// Marks `tenant`'s record opened (before its group's first open here); a no-op if it is.
/// Whether it was marked before (this is not the group's first open here).
pub fn mark_opened(data_dir: &Path, tenant: &str) -> anyhow::Result<bool> {
    let hosted = read_hosted(data_dir, tenant)?
        .ok_or_else(|| anyhow!("tenant {tenant:?} has no hosted record to mark opened"))?;
    // The ledger first: a crash after it and before the `opened` line leaves a record still
    // unopened (no vote was granted, the next open is a first one), never an opened group the
    // ledger forgets. Noted on every open, not only the first (review s32 M-2): a group opened
    // by a build before the ledger has its `opened` line and no entry, and gets one at its
    // first start under this build (one `stat` when the entry stands).
    super::opened_ledger::note(data_dir, tenant)?;
    if !hosted.opened {
        write(data_dir, tenant, &hosted.voters, true)?;
    }
    Ok(hosted.opened)
}

/// Whether `tenant`'s group lost its directory since this node may have voted in it: its
/// state store is gone, and its record says it was opened or the ledger names it (review s32
/// M-1: a record re-created unopened after one loss, then a second loss of the directory
/// before the group opened again, read as a first open). The ledger is noted only once the
/// state store stands (`mark_opened`) or on a rejoin's declaration (`Declarations::declared`),
/// so an entry without a state store is a lost directory or a rejoin, both opened joining. If
/// lost, the joining marker is written before anything reopens the directory. Blocking.
pub fn lost_since_opened(data_dir: &Path, tenant: &str, hosted: &Hosted) -> anyhow::Result<bool> {
    let dir = super::registry::tenant_dir(data_dir, tenant);
    let state = dir.join(super::open::STATE_FILE);
    let gone = !state
        .try_exists()
        .with_context(|| format!("reading {}", state.display()))?;
    let lost = gone && (hosted.opened || super::opened_ledger::contains(data_dir, tenant)?);
    if lost {
        // Whatever its log holds: the vote lived in the state store. Raft's gate writes the
        // marker only over an empty log.
        write_joining_marker(&dir)?;
    }
    Ok(lost)
}

/// Writes a record in place: a temporary file fsynced, renamed over the name, the directory
/// fsynced, so a crash leaves the old record or the new one.
fn write(data_dir: &Path, tenant: &str, voters: &[u64], opened: bool) -> anyhow::Result<()> {
    let dir = data_dir.join(HOSTED_DIR);
    // The directory's own name is fsynced on every record too: an earlier record may have
    // made it and crashed before its parent's fsync.
    queenmq_storage::create_dir_durable(&dir)
        .and_then(|_| queenmq_storage::sync_parent(&dir))
        .with_context(|| format!("creating {}", dir.display()))?;
    let path = path_of(data_dir, tenant);
    let tmp = dir.join(format!("{tenant}{TMP_SUFFIX}"));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(render(voters, opened).as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, &path)
        .and_then(|()| queenmq_storage::sync_parent(&path))
        .with_context(|| format!("making {} durable", path.display()))?;
    Ok(())
}

/// The voter that founds a tenant's group, so it leads first: a choice by a hash of the name
/// over the sorted voters, the same on every node and in every version (FNV-1a, 64 bits), so
/// tenants spread their leaders over the nodes. `None` for no voters.
pub fn preferred(tenant: &str, voters: &[u64]) -> Option<u64> {
    let mut sorted = voters.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tenant.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let n = u64::try_from(sorted.len()).ok().filter(|n| *n > 0)?;
    let at = usize::try_from(h % n).ok()?;
    sorted.get(at).copied()
}

/// Removes the horizon the `default` apply passed, as cleanup: a failure is logged and
/// counted and the file kept (review s32 M-4: it stopped `default` at the same declaration on
/// every restart). Keeping it is safe: above it, `before_rejoin` answers the same with or
/// without it, and a later join removes it before writing its marker.
fn pass_horizon(
    marker: &Path,
    horizon: u64,
    index: u64,
    remove: impl FnOnce(&Path) -> std::io::Result<()>,
) -> bool {
    match remove(marker) {
        Ok(()) => {
            tracing::info!(
                horizon,
                index,
                "the default group's apply passed its joining horizon: removed"
            );
            true
        }
        Err(e) => {
            metrics::counter!("queen_join_horizon_remove_failures_total").increment(1);
            tracing::warn!(
                horizon,
                index,
                marker = %marker.display(),
                error = %e,
                "the joining horizon could not be removed; kept (harmless), retried at the next declaration"
            );
            false
        }
    }
}

#[cfg(test)]
#[path = "hosted_tests.rs"]
mod tests;

/// Where the `default` group's apply hands the declarations it applied (effect 67): each is
/// recorded durably on the Raft apply path, so the entry counts as applied only once its
/// record stands, then queued for the registry to open the tenant's group. The queue holds
/// each tenant once, so it is bounded by the tenants declared.
#[derive(Clone)]
pub struct Declarations {
    data_dir: PathBuf,
    pending: std::sync::Arc<Pending>,
    /// `max_tenants`: the `default` engine refuses a declaration past it (review s31 tenants
    /// M1).
    max_tenants: u64,
    /// How a passed horizon is removed: the file's removal, or a failing one in tests (this
    /// node's tests run as root, where no permission makes an unlink fail).
    remove_horizon: fn(&Path) -> std::io::Result<()>,
}

#[derive(Default)]
struct Pending {
    tenants: std::sync::Mutex<std::collections::BTreeSet<String>>,
    wake: tokio::sync::Notify,
}

impl std::fmt::Debug for Declarations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declarations")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

impl Declarations {
    pub fn new(data_dir: PathBuf) -> Declarations {
        Declarations {
            data_dir,
            pending: Default::default(),
            max_tenants: u64::MAX,
            remove_horizon: queenmq_raft::join_horizon::remove_horizon,
        }
    }

    #[cfg(test)]
    fn with_horizon_remover(mut self, remove: fn(&Path) -> std::io::Result<()>) -> Declarations {
        self.remove_horizon = remove;
        self
    }

    /// Caps the groups the `default` group's declarations may bring the cluster to, `default`
    /// included.
    pub fn with_max_tenants(mut self, max_tenants: u64) -> Declarations {
        self.max_tenants = max_tenants;
        self
    }

    pub fn max_tenants(&self) -> u64 {
        self.max_tenants
    }

    /// A committed declaration applied at log `index`: recorded (a failure stops the
    /// `default` group, whose apply must not pass an entry it did not act on), then queued
    /// for opening.
    pub fn applied(&self, index: u64, tenant: &str, voters: &[u64]) -> Result<(), String> {
        self.declared(index, tenant, voters, false)
    }

    /// As `applied`, with `joining` forcing the joining marker whatever the horizon says (a
    /// snapshot's declarations on a node that ever joined: `checkpoint_declarations`).
    pub fn declared(
        &self,
        index: u64,
        tenant: &str,
        voters: &[u64],
        joining: bool,
    ) -> Result<(), String> {
        // Refused before anything is written: a bad name must not make a directory.
        check(tenant, voters).map_err(|e| format!("declaration of {tenant:?}: {e}"))?;
        // A declaration this node may have voted on before its directory was wiped (a rejoin,
        // `cluster_join`, rebuilding its records by replay): T's group opens joining, so it
        // neither founds nor votes until it has caught up as a learner (review s27 tenants
        // M2). The marker is written before the record (review s28 M-1): the record is what
        // opens the group, at a restart or on a request, so a kill -9 between the two must
        // leave the marker without the record (accepted at start, `to_open`; the replay
        // writes the record), never the record without the marker. A record that stood
        // already gets the marker too unless the group was opened since (review s27 tenants
        // M1: a record written unmarked by an earlier version); once opened, the marker was
        // written before that open.
        let standing = read_hosted(&self.data_dir, tenant).map_err(|e| format!("{e:#}"))?;
        // The record is missing but the ledger says the group was opened here: the record
        // and the tenant's directory were both lost, and this node may have voted in that
        // group (review s31 tenants M2). A standing unopened record means no vote yet, since
        // the ledger and the `opened` line are both written before Raft starts.
        let lost_opened = standing.is_none()
            && super::opened_ledger::contains(&self.data_dir, tenant)
                .map_err(|e| format!("{e:#}"))?;
        if lost_opened || joining || self.before_rejoin(index)? {
            let pending = standing.is_none_or(|h| !h.opened);
            if pending {
                let dir = super::registry::tenant_dir(&self.data_dir, tenant);
                write_joining_marker(&dir).map_err(|e| format!("{e:#}"))?;
                // The ledger too (review s32 M-3): this node may have voted in T's group
                // before its wipe, and the marker and the horizon both go once caught up. If
                // T's record and directory are lost again before T opens, the ledger alone
                // still marks it (`lost_since_opened`, the `lost_opened` check above).
                super::opened_ledger::note(&self.data_dir, tenant).map_err(|e| format!("{e:#}"))?;
                tracing::warn!(
                    tenant,
                    index,
                    "declared before this node rejoined: the tenant's group opens joining"
                );
            }
        }
        let recorded = record(&self.data_dir, tenant, voters).map_err(|e| format!("{e:#}"))?;
        if let Recorded::New(v) = &recorded {
            tracing::info!(tenant, voters = ?v, "tenant declared; its group is opened");
        }
        self.lock().insert(tenant.to_owned());
        self.pending.wake.notify_one();
        Ok(())
    }

    /// Whether the declaration at `index` may predate this node's rejoin (review s27 tenants
    /// H1): at or below the joining horizon, the committed index `default`'s leader answered
    /// a commit read with after the node joined (`queenmq_raft::join_horizon`; review s28
    /// M-3: before session 32, the first append's), kept durably beside its joining marker. A
    /// declaration above it was committed after the node came back, so no group of it existed
    /// that this node could have voted in and forgotten: it is founded as on any node (were
    /// this node its preferred founder and marked, nobody would found it). Without a horizon
    /// (none read yet) a standing marker counts every declaration.
    fn before_rejoin(&self, index: u64) -> Result<bool, String> {
        let marker = self.data_dir.join(crate::cluster_member::JOIN_MARKER);
        let stands = marker
            .try_exists()
            .map_err(|e| format!("reading {}: {e}", marker.display()))?;
        match queenmq_raft::join_horizon::read_horizon(&marker)? {
            Some(horizon) if index <= horizon => Ok(true),
            Some(horizon) => {
                // The apply passed the horizon and the node caught up: every declaration it
                // bounds has its record (and marker) durably, and a replay from an older
                // checkpoint finds them standing, so it has done its work (review s28 M-2:
                // it was never removed). Marker still standing: a later start may still
                // read it.
                if !stands {
                    pass_horizon(&marker, horizon, index, self.remove_horizon);
                }
                Ok(false)
            }
            None => Ok(stands),
        }
    }

    /// The tenants queued since the last take.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.lock()).into_iter().collect()
    }

    /// Returns once something was queued after the last `take` (or at once if it was before).
    pub async fn queued(&self) {
        self.pending.wake.notified().await
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.pending
            .tenants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

/// Writes the joining marker (`cluster_member::JOIN_MARKER`) into a lost tenant group's
/// directory, durably, unless it stands: the member then grants no vote and calls no election
/// until it has caught up as a learner (raft `VoteGate`).
pub fn write_joining_marker(group_dir: &Path) -> anyhow::Result<()> {
    let marker = group_dir.join(crate::cluster_member::JOIN_MARKER);
    if marker.exists() {
        return Ok(());
    }
    queenmq_storage::create_dir_durable(group_dir)
        .with_context(|| format!("creating {}", group_dir.display()))?;
    let mut f =
        std::fs::File::create(&marker).with_context(|| format!("creating {}", marker.display()))?;
    f.write_all(
        b"this tenant group's directory was lost after it was opened here, or its node rejoins \
the cluster: it does not vote until it has caught up as a learner (docs/cluster.md \"Tenants\")\n",
    )
    .and_then(|()| f.sync_all())
    .and_then(|()| queenmq_storage::sync_parent(&marker))
    .with_context(|| format!("writing {}", marker.display()))?;
    Ok(())
}
