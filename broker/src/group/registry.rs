//! The groups of a node, keyed by tenant. The `default` group keeps the data dir's root layout
//! (`<data_dir>/log`, `<data_dir>/state.redb`), so data dirs written before tenants start
//! unchanged; tenant `t`'s group lives in `<data_dir>/tenants/t/` with the same layout. A
//! token's `tenant` claim selects a group and its first use starts it; at start-up every group
//! whose directory exists is started again. Each group has its own job queue, [`LiveSlot`]
//! and supervisor, so one group failing (and being rebuilt) leaves the others serving.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use queenmq_protocol::{check_tenant_name, ErrorCode, QueenError, DEFAULT_TENANT};
use queenmq_storage::IoBackend;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::{start, supervise, LiveSlot, Tail};
use crate::config::Config;
use crate::engine::{EngineConfig, Job};

/// The directory below the data dir that holds the tenants' groups.
pub const TENANTS_DIR: &str = "tenants";

/// A group that runs: what the bus and the scrape need of it.
pub struct Group {
    pub tenant: Arc<str>,
    /// Its job queue: it outlives the group's incarnations.
    pub tx: mpsc::Sender<Job>,
    pub live: Arc<LiveSlot>,
    /// Where its files are (the data dir itself for `default`).
    pub dir: PathBuf,
    /// What it holds in the node's held pools (set by its engine's accounting).
    pub held: Arc<std::sync::atomic::AtomicUsize>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// A tenant's `LOCK`, held while the group exists: nothing else opens its files.
    _lock: Option<crate::server::DirLock>,
}

/// How the registry sizes and places its groups.
pub struct RegistryOptions {
    /// Groups at most, `default` included.
    pub max_groups: usize,
    /// The entry cache of a tenant's group (the `default` group's is `EngineConfig::cache_bytes`).
    pub tenant_cache_bytes: usize,
    /// Tests: a tenant whose log lives on this backend instead of in files.
    pub log_backends: HashMap<String, Arc<dyn IoBackend>>,
}

/// A tenant's place in the registry, kept once made (it counts under the cap whether its
/// group runs or not). Starts are serialized by `starting`, so two groups never open one
/// directory; a failed start is remembered with a back-off, so requests that arrive
/// meanwhile are refused at once instead of each reopening and replaying the files.
#[derive(Default)]
struct Slot {
    starting: tokio::sync::Mutex<()>,
    /// A start task exists: later requests wait for it rather than spawn one more each (a
    /// start hung on a disk would otherwise collect one detached task per retry).
    start_spawned: std::sync::atomic::AtomicBool,
    state: Mutex<SlotState>,
}

#[derive(Default)]
enum SlotState {
    #[default]
    NotStarted,
    Running(Arc<Group>),
    Failed {
        retry_at: Instant,
        backoff: Duration,
    },
}

/// How a cluster member's tenant group starts: its declared voters with their addresses, and
/// whether its directory was lost since its first open here.
pub struct TenantStart {
    pub voters: BTreeMap<u64, queenmq_raft::BasicNode>,
    pub lost: bool,
}

/// How long a declaring request waits, in steps, for the committed declaration to be applied
/// here (the leader answers at commit; its apply follows).
const DECLARED_WAIT_STEP: Duration = Duration::from_millis(20);
const DECLARED_WAIT_STEPS: u32 = 250;

/// The longest a request waits on a declaration: the `default` engine's answer bound (its
/// proposal committed or refused) and the wait for the group to open here after it. The
/// declaration's task itself runs on until the engine answered (`Declaring::declare_once`).
fn declare_bound() -> Duration {
    crate::engine::BusWaits::default()
        .answer
        .saturating_add(DECLARED_WAIT_STEP.saturating_mul(DECLARED_WAIT_STEPS))
}

/// A failed start is tried again after this, doubling up to `START_BACKOFF_MAX`.
const START_BACKOFF_MIN: Duration = Duration::from_secs(1);
const START_BACKOFF_MAX: Duration = Duration::from_secs(300);

impl Slot {
    fn state(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn running(&self) -> Option<Arc<Group>> {
        match &*self.state() {
            SlotState::Running(g) => Some(g.clone()),
            _ => None,
        }
    }

    /// Refuses while a failed start backs off; `None` when a start may be tried.
    fn backing_off(&self, tenant: &str) -> Option<QueenError> {
        match &*self.state() {
            SlotState::Failed { retry_at, .. } if Instant::now() < *retry_at => {
                let secs = retry_at.saturating_duration_since(Instant::now()).as_secs() + 1;
                Some(QueenError::unavailable(format!(
                    "the group of tenant {tenant:?} failed to start; it is tried again in {secs} s"
                )))
            }
            _ => None,
        }
    }
}

pub struct Registry {
    cfg: Config,
    ecfg: EngineConfig,
    opts: RegistryOptions,
    slots: Mutex<BTreeMap<String, Arc<Slot>>>,
    stop: watch::Sender<bool>,
    stopping: AtomicBool,
    /// `accept_data_loss` is the operator's word for the starts of this boot only: a tenant
    /// started later by a request must not drop data under it.
    booting: AtomicBool,
    /// A cluster member with `cluster_tenant_groups`: the hosted records and the queue of
    /// declarations the `default` group applied. None: a single node, or a member serving
    /// only `default`.
    declarations: Option<super::hosted::Declarations>,
    /// Declarations under way here, each holding a place under `max_groups`.
    declaring: Arc<super::declaring::Declaring>,
}

/// Tenant directories below `<data_dir>/tenants`, in name order; names that could not have
/// been created by a token are skipped with a warning.
fn tenant_dirs(data_dir: &Path) -> anyhow::Result<Vec<String>> {
    let dir = data_dir.join(TENANTS_DIR);
    let Some(entries) = super::dir_listing::entries_if_any(&dir)? else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || check_tenant_name(&name).is_err() || name == DEFAULT_TENANT {
            tracing::warn!(path = %entry.path().display(), "not a tenant's group directory; ignored");
            continue;
        }
        found.push(name);
    }
    found.sort();
    Ok(found)
}

/// A cluster member's tenants to open at start: those its hosted records name (the committed
/// declarations it applied), not the directories below `<data_dir>/tenants`. A directory
/// without a record is a single node's tenant, which this member cannot serve clustered: the
/// start is refused, as it is with the key off (docs/cluster.md "Tenants"). Unless it holds
/// the joining marker and nothing else, or nothing at all: a rejoining node's apply makes the
/// directory, then the marker, then the record (review s28 M-1), so a kill -9 before the
/// record leaves one of these (review s29 M-C: the empty directory made before the marker's
/// name was durable); no group was opened there, and the replay of the declaration, which
/// comes before any record can open it, writes the marker and the record.
pub(crate) fn to_open(data_dir: &Path) -> anyhow::Result<Vec<String>> {
    let hosted: Vec<String> = super::hosted::read_all(data_dir)?
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    for dir in tenant_dirs(data_dir)? {
        if hosted.binary_search(&dir).is_err() && !holds_no_group(&tenant_dir(data_dir, &dir))? {
            return Err(anyhow!(
                "{} holds the group of tenant {dir:?}, which no committed declaration of \
                 this cluster names ({}/{dir} is missing): a single node's tenant cannot be \
                 served clustered; move it out or restore its hosted record",
                data_dir.join(TENANTS_DIR).display(),
                super::hosted::HOSTED_DIR
            ));
        }
    }
    Ok(hosted)
}

/// Whether a tenant's directory is what a kill -9 during the marker step leaves: empty, or
/// the joining marker (a file, of any length: its bytes say nothing) and nothing else. Either
/// way no store, log or vote stands there.
fn holds_no_group(dir: &Path) -> anyhow::Result<bool> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        names.push(entry.file_name());
        if names.len() > 1 {
            return Ok(false);
        }
    }
    Ok(match names.first() {
        None => true,
        Some(name) => {
            name == crate::cluster_member::JOIN_MARKER
                && dir.join(crate::cluster_member::JOIN_MARKER).is_file()
        }
    })
}

/// Where `tenant`'s group keeps its files.
pub fn tenant_dir(data_dir: &Path, tenant: &str) -> PathBuf {
    if tenant == DEFAULT_TENANT {
        data_dir.to_path_buf()
    } else {
        data_dir.join(TENANTS_DIR).join(tenant)
    }
}

impl Registry {
    /// Starts the `default` group (its failure fails the start: the operator must act), then,
    /// in the background, every tenant group found on disk (a failure there is logged and
    /// retried by the tenant's next request: one tenant's damaged files must not keep the
    /// others down).
    pub async fn open(
        cfg: Config,
        ecfg: EngineConfig,
        opts: RegistryOptions,
    ) -> anyhow::Result<Arc<Registry>> {
        let (stop, _) = watch::channel(false);
        let declarations = ecfg.cluster.as_ref().and_then(|m| m.declarations.clone());
        let reg = Arc::new(Registry {
            declarations,
            declaring: Default::default(),
            cfg,
            ecfg,
            opts,
            slots: Mutex::new(BTreeMap::new()),
            stop,
            stopping: AtomicBool::new(false),
            booting: AtomicBool::new(true),
        });
        if let Some(d) = &reg.declarations {
            // Here, before `default` opens, no declaration's apply nor group start writes a
            // record yet, so a temporary file is a crash's leftover.
            let dir = d.data_dir().to_path_buf();
            tokio::task::spawn_blocking(move || {
                super::hosted::remove_leftovers(&dir)?;
                // A damaged ledger stops the start here, not at the first declaration it
                // would be read for (review s31 tenants M2).
                super::opened_ledger::check_all(&dir).map(drop)
            })
            .await
            .map_err(|e| anyhow!("removing hosted leftovers: {e}"))??;
        }
        reg.group(DEFAULT_TENANT)
            .await
            .map_err(|e| anyhow!("{}", e.message))?;
        // The others start in the background, one after another: the door opens as soon as
        // `default` serves, so probes answer while a big tenant replays, and a request for a
        // tenant still starting waits for that start (or starts it first).
        let found = match &reg.declarations {
            None => tenant_dirs(&reg.cfg.data_dir)?,
            Some(d) => to_open(d.data_dir())?,
        };
        if let Some(d) = reg.declarations.clone() {
            tokio::spawn(open_declared(Arc::downgrade(&reg), d, reg.stop.subscribe()));
        }
        let boot = reg.clone();
        tokio::spawn(async move {
            for tenant in found {
                if let Err(e) = boot.group(&tenant).await {
                    tracing::error!(tenant, error = %e.message, "the tenant's group did not start; its next request tries again");
                }
            }
            boot.booting.store(false, Ordering::SeqCst);
            tracing::info!("every tenant group found on disk was started");
        });
        Ok(reg)
    }

    /// The running group of `tenant`, if it has started.
    pub fn get(&self, tenant: &str) -> Option<Arc<Group>> {
        self.lock().get(tenant).and_then(|s| s.running())
    }

    /// Every group that has started, in tenant order.
    pub fn running(&self) -> Vec<Arc<Group>> {
        self.lock().values().filter_map(|s| s.running()).collect()
    }

    /// The group of `tenant`, started on its first use. Past `max_groups` a new tenant is
    /// refused (403: the cap is the operator's to raise, retrying does not help).
    pub async fn group(self: &Arc<Self>, tenant: &str) -> Result<Arc<Group>, QueenError> {
        let slot = {
            let mut slots = self.lock();
            if let Some(g) = slots.get(tenant).and_then(|s| s.running()) {
                return Ok(g);
            }
            if self.stopping.load(Ordering::SeqCst) {
                return Err(QueenError::unavailable("the node is shutting down"));
            }
            check_tenant_name(tenant).map_err(QueenError::bad_request)?;
            // Only `default` is one Raft group across the cluster: a tenant group started on
            // one node alone would hold writes the others never see (docs/cluster.md).
            if self.ecfg.cluster.is_some()
                && tenant != DEFAULT_TENANT
                && self.declarations.is_none()
            {
                return Err(QueenError::new(
                    ErrorCode::Unsupported,
                    format!(
                        "unsupported: tenant {tenant:?}: a clustered node serves only the \
                         default tenant (tenant groups are not clustered yet)"
                    ),
                ));
            }
            // Declarations under way hold their places too (`group_or_declare`).
            let reserved = self
                .declaring
                .reserved_besides(|n| n == tenant || slots.contains_key(n));
            if !slots.contains_key(tenant) && slots.len() + reserved >= self.opts.max_groups {
                return Err(QueenError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "this node runs at most {} tenant groups (max_tenants) and tenant \
                         {tenant:?} would be one more",
                        self.opts.max_groups
                    ),
                ));
            }
            slots.entry(tenant.to_owned()).or_default().clone()
        };
        if let Some(refusal) = slot.backing_off(tenant) {
            return Err(refusal);
        }
        // Outside the map's lock: opening storage and replaying the log take their time, and
        // other tenants' requests must not wait for them. In a task of its own: a client that
        // goes away must not cancel a start halfway (Raft started, files open, no group).
        if slot.start_spawned.swap(true, Ordering::SeqCst) {
            // Waiting on the lock is cancel-safe: a client that leaves takes nothing along. The
            // start task may not hold the lock yet: look again until it has left an outcome.
            loop {
                drop(slot.starting.lock().await);
                if let Some(g) = slot.running() {
                    return Ok(g);
                }
                if let Some(refusal) = slot.backing_off(tenant) {
                    return Err(refusal);
                }
                if !slot.start_spawned.load(Ordering::SeqCst) {
                    return Err(QueenError::unavailable(
                        "this tenant's queue group did not start; retry",
                    ));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let (reg, name) = (self.clone(), tenant.to_owned());
        tokio::spawn(async move {
            let started = reg.start_once(&slot, &name).await;
            slot.start_spawned.store(false, Ordering::SeqCst);
            started
        })
        .await
        .unwrap_or_else(|e| {
            Err(QueenError::unavailable(format!(
                "the group's start stopped: {e}"
            )))
        })
    }

    /// One start at a time per tenant: whoever waited for the lock finds the group running,
    /// or the failure it must not repeat before its back-off ends.
    async fn start_once(&self, slot: &Slot, tenant: &str) -> Result<Arc<Group>, QueenError> {
        let _one = slot.starting.lock().await;
        if let Some(g) = slot.running() {
            return Ok(g);
        }
        if let Some(refusal) = slot.backing_off(tenant) {
            return Err(refusal);
        }
        if self.stopping.load(Ordering::SeqCst) {
            return Err(QueenError::unavailable("the node is shutting down"));
        }
        // A new tenant's group creates its files and writes its first entries: on a full
        // disk that is refused like any write that adds data, and tried again once there is
        // space (no back-off: nothing failed). A tenant with files starts, so its reads answer.
        if self.ecfg.disk.as_ref().is_some_and(|d| d.is_full()) {
            let dir = tenant_dir(&self.cfg.data_dir, tenant);
            if !tokio::fs::try_exists(&dir).await.unwrap_or(false) {
                return Err(crate::disk_gate::storage_full(
                    "a new tenant's queue group cannot be created",
                ));
            }
        }
        let voters = match self.declared_voters(tenant).await {
            Ok(v) => v,
            Err(e) => {
                // Undeclared: nothing started, and the name holds no place under the cap.
                if e.code == ErrorCode::NotFound {
                    self.forget_unstarted(tenant);
                }
                return Err(e);
            }
        };
        match self.start_group(tenant, voters).await {
            Ok(g) => {
                *slot.state() = SlotState::Running(g.clone());
                Ok(g)
            }
            Err(e) => {
                let mut state = slot.state();
                let backoff = match &*state {
                    SlotState::Failed { backoff, .. } => (*backoff * 2).min(START_BACKOFF_MAX),
                    _ => START_BACKOFF_MIN,
                };
                *state = SlotState::Failed {
                    retry_at: Instant::now() + backoff,
                    backoff,
                };
                // The reason names server paths: the log has it, the client gets a sentence.
                tracing::error!(tenant, error = %format!("{e:#}"), retry_in_s = backoff.as_secs(), "starting the tenant's group failed");
                if e.chain().any(crate::disk_gate::is_enospc) {
                    return Err(crate::disk_gate::storage_full(
                        "the tenant's queue group could not write its files",
                    ));
                }
                Err(QueenError::unavailable(format!(
                    "the group of tenant {tenant:?} cannot start (the server log says why); \
                     it is tried again in {} s",
                    backoff.as_secs()
                )))
            }
        }
    }

    /// [`Registry::group`], declaring a cluster member's tenant first when its group is not
    /// declared and `writes` (a write's first use; a read of an undeclared tenant is answered
    /// 404 without declaring). The declaration goes through the `default` group: proposed on
    /// its leader (a follower's door relayed the request there, `leader_lookup`), it names
    /// the `default` group's voters, and the tenant's group opens once it committed and its
    /// hosted record stands here.
    pub async fn group_or_declare(
        self: &Arc<Self>,
        tenant: &str,
        writes: bool,
    ) -> Result<Arc<Group>, QueenError> {
        match self.group(tenant).await {
            Err(e) if e.code == ErrorCode::NotFound && writes && self.declarations.is_some() => {}
            other => return other,
        }
        // One declaration per name runs at a time, in a task of its own; every request for
        // the name meanwhile waits on it, at most `declare_bound` from its start (review s28
        // M-4). The task, not the request, holds the place under the cap, until the `default`
        // engine answered: the caller's bound (the bus's enqueue timeout) and the waiters'
        // may end while the declaration sits in the engine's queue or log and still commits
        // (review s27 tenants L1, review s29 M-A).
        let (reg, name) = (self.clone(), tenant.to_owned());
        self.declaring
            .declare_once(tenant, declare_bound(), move || async move {
                reg.reserve_and_declare(&name).await.map(drop)
            })
            .await?;
        self.group(tenant).await
    }

    /// Takes a place under the cap for `tenant`, counting the open groups, the hosted records
    /// (which are permanent) and the other declarations under way (review s27 tenants M1),
    /// then declares it holding that place.
    async fn reserve_and_declare(self: &Arc<Self>, tenant: &str) -> Result<Arc<Group>, QueenError> {
        let root = self.cfg.data_dir.clone();
        let hosted = tokio::task::spawn_blocking(move || super::declaring::hosted_names(&root))
            .await
            .map_err(|e| {
                QueenError::unavailable(format!("listing the hosted records stopped: {e}"))
            })?
            .map_err(|e| {
                QueenError::unavailable(format!("listing the hosted records failed: {e}"))
            })?;
        let place = {
            let slots = self.lock();
            let mut taken = hosted;
            taken.extend(slots.keys().cloned());
            self.declaring
                .reserve(tenant, &taken, self.opts.max_groups)
                .ok_or_else(|| {
                    QueenError::new(
                        ErrorCode::Forbidden,
                        format!(
                            "this node runs at most {} tenant groups (max_tenants) and tenant \
                             {tenant:?} would be one more",
                            self.opts.max_groups
                        ),
                    )
                })?
        };
        self.declare_holding(tenant, place).await
    }

    /// Proposes the declaration of `tenant` through the `default` group and waits for its
    /// group to open here, holding `_place` under the cap until then.
    async fn declare_holding(
        self: &Arc<Self>,
        tenant: &str,
        _place: super::declaring::Reservation,
    ) -> Result<Arc<Group>, QueenError> {
        let default = self.group(DEFAULT_TENANT).await?;
        let live = default
            .live
            .get()
            .map_err(|why| QueenError::unavailable(format!("the default group is down: {why}")))?;
        let membership = live.node.membership().await.map_err(|e| {
            QueenError::unavailable(format!("the default group's membership is unknown: {e}"))
        })?;
        drop(live);
        let mut voters: Vec<u64> = membership
            .members
            .iter()
            .filter(|m| m.voter)
            .map(|m| m.id)
            .collect();
        voters.sort_unstable();
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Job {
            ctx: queenmq_protocol::RequestCtx {
                tenant: DEFAULT_TENANT.to_owned(),
                principal: None,
                access: queenmq_protocol::Access::Open,
            },
            cmd: queenmq_protocol::Command::DeclareTenant {
                tenant: tenant.to_owned(),
                voters,
            },
            reply,
        };
        default
            .tx
            .send(job)
            .await
            .map_err(|_| QueenError::unavailable("the engine is shutting down"))?;
        answer
            .await
            .map_err(|_| QueenError::unavailable("the engine stopped before answering"))??;
        // Committed: this node's apply records it and queues the opening; the leader's apply
        // may follow its answer by a moment.
        for _ in 0..DECLARED_WAIT_STEPS {
            match self.group(tenant).await {
                Err(e) if e.code == ErrorCode::NotFound => {
                    tokio::time::sleep(DECLARED_WAIT_STEP).await
                }
                other => return other,
            }
        }
        Err(QueenError::unavailable(format!(
            "tenant {tenant:?} was declared but its group is not open here yet; retry"
        )))
    }

    /// A cluster member's tenant group: the voters of its committed declaration, with their
    /// addresses from the `default` group's membership (else `peers`), and whether its
    /// directory was lost since it was first opened here (it then restarts joining). None for
    /// `default` and off a member with `cluster_tenant_groups`. An undeclared tenant is not
    /// found: only a committed declaration opens a group.
    async fn declared_voters(&self, tenant: &str) -> Result<Option<TenantStart>, QueenError> {
        let (Some(d), false) = (&self.declarations, tenant == DEFAULT_TENANT) else {
            return Ok(None);
        };
        let (dir, name) = (d.data_dir().to_path_buf(), tenant.to_owned());
        let read = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let Some(hosted) = super::hosted::read_hosted(&dir, &name)? else {
                return Ok(None);
            };
            // Lost: opened here once (the record or the ledger says so), and its state store
            // is gone whatever its log holds; the marker is then written.
            let lost = super::hosted::lost_since_opened(&dir, &name, &hosted)?;
            // Marked opened by the start itself (`ClusterMember::start`), once the state store
            // stands and before Raft may grant a vote: a vote is never forgotten by a later
            // start that finds the directory gone, and a first open that failed before its
            // store stood is not taken for a lost one (review s27 tenants H1).
            Ok(Some((hosted.voters, lost)))
        })
        .await
        .map_err(|e| QueenError::unavailable(format!("reading the hosted record stopped: {e}")))?;
        let (voters, lost) = match read {
            Ok(Some(v)) => v,
            Ok(None) => {
                return Err(QueenError::not_found(format!(
                    "tenant {tenant:?} is not declared in this cluster"
                )))
            }
            Err(e) => {
                tracing::error!(tenant, error = %format!("{e:#}"), "the tenant's hosted record does not read");
                return Err(QueenError::unavailable(format!(
                    "the hosted record of tenant {tenant:?} does not read (the server log says why)"
                )));
            }
        };
        let known = match self.get(DEFAULT_TENANT).map(|g| g.live.get()) {
            Some(Ok(live)) => live.node.membership().await.ok(),
            _ => None,
        };
        let peers = self.ecfg.cluster.as_ref().map(|m| m.peer_nodes());
        let mut out = BTreeMap::new();
        for id in voters {
            let peer = peers
                .as_ref()
                .and_then(|p| p.get(&id))
                .map(|n| n.addr.clone());
            let addr =
                super::voter_addr::address_of(id, known.as_ref(), peer).ok_or_else(|| {
                    QueenError::unavailable(format!(
                        "voter {id} of tenant {tenant:?} has no known address (the default group \
                     is not live here, and it is not in peers); retry"
                    ))
                })?;
            out.insert(id, queenmq_raft::BasicNode::new(addr));
        }
        if lost {
            tracing::warn!(tenant, "the tenant's group directory was lost since it was opened here: it restarts joining, votes nothing until it has caught up as a learner (docs/cluster.md \"Tenants\")");
        }
        Ok(Some(TenantStart { voters: out, lost }))
    }

    /// Drops the place a tenant took while it was looked up, if no start ran for it.
    fn forget_unstarted(&self, tenant: &str) {
        let mut slots = self.lock();
        if slots
            .get(tenant)
            .is_some_and(|s| matches!(&*s.state(), SlotState::NotStarted))
        {
            slots.remove(tenant);
        }
    }

    async fn start_group(
        &self,
        tenant: &str,
        voters: Option<TenantStart>,
    ) -> anyhow::Result<Arc<Group>> {
        let dir = tenant_dir(&self.cfg.data_dir, tenant);
        let mut cfg = self.cfg.clone();
        cfg.accept_data_loss &= self.booting.load(Ordering::SeqCst);
        let mut ecfg = self.ecfg.clone();
        ecfg.tenant = Arc::from(tenant);
        ecfg.tenant_lost = voters.as_ref().is_some_and(|v| v.lost);
        ecfg.tenant_voters = voters.map(|v| v.voters);
        ecfg.log_backend = self
            .opts
            .log_backends
            .get(tenant)
            .cloned()
            .map(crate::engine::LogBackend);
        let mut lock = None;
        if tenant != DEFAULT_TENANT {
            (ecfg.cache_bytes, ecfg.store_cache_bytes) =
                tenant_caches(self.opts.tenant_cache_bytes);
            let (create, tenants) = (dir.clone(), self.cfg.data_dir.join(TENANTS_DIR));
            let locked = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
                // Creates the directory durably and takes its LOCK: a second group on these
                // files (a start racing a start, a stray process) is refused, never opened.
                let lock = crate::server::lock_data_dir(&create)?;
                // An earlier start may have made the directory and then failed its fsync: the
                // names of both levels are made durable on every start, before anything is
                // acknowledged in them.
                queenmq_storage::sync_parent(&create)
                    .and_then(|()| queenmq_storage::sync_parent(&tenants))
                    .with_context(|| format!("fsyncing the directories of {}", create.display()))?;
                Ok(lock)
            })
            .await
            .map_err(|e| anyhow!("creating the group's directory stopped: {e}"))??;
            lock = Some(locked);
            cfg.data_dir = dir.clone();
        }
        // Its own counter: ecfg is a clone of the node's, whose counter would be shared.
        ecfg.group_held = Default::default();
        let held = ecfg.group_held.clone();
        let (tx, jobs) = crate::engine::job_queue(ecfg.queue_depth);
        let first = start(&cfg, &ecfg, &jobs, Tail::AsFound)
            .await
            .with_context(|| format!("starting the group in {}", dir.display()))?;
        let live = LiveSlot::new(first.live.clone());
        let task = tokio::spawn(supervise(
            cfg,
            ecfg,
            first,
            live.clone(),
            jobs,
            self.stop.subscribe(),
        ));
        tracing::info!(tenant, dir = %dir.display(), "group started");
        Ok(Arc::new(Group {
            tenant: Arc::from(tenant),
            tx,
            live,
            dir,
            held,
            task: Mutex::new(Some(task)),
            _lock: lock,
        }))
    }

    /// Stops every group (each answers its parked pops and writes a final checkpoint),
    /// waiting at most `grace` for all of them together.
    pub async fn stop_all(&self, grace: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.stop.send(true);
        let tasks: Vec<(Arc<str>, JoinHandle<()>)> = self
            .running()
            .iter()
            .filter_map(|g| {
                let task = g.task.lock().unwrap_or_else(|p| p.into_inner()).take()?;
                Some((g.tenant.clone(), task))
            })
            .collect();
        let deadline = tokio::time::Instant::now() + grace;
        for (tenant, task) in tasks {
            match tokio::time::timeout_at(deadline, task).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(%tenant, error = %e, "the group's task failed"),
                Err(_) => tracing::warn!(%tenant, "the group did not stop within the grace period"),
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Opens the group of every tenant the `default` group's apply declared, as the declarations
/// arrive, until the registry stops or is gone. A failed start is logged; the tenant's next
/// request tries again.
async fn open_declared(
    reg: std::sync::Weak<Registry>,
    d: super::hosted::Declarations,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = d.queued() => {}
            _ = stop.changed() => return,
        }
        for tenant in d.take() {
            let Some(reg) = reg.upgrade() else { return };
            if let Err(e) = reg.group(&tenant).await {
                tracing::error!(tenant, error = %e.message, "the declared tenant's group did not start; its next request tries again");
            }
        }
    }
}

/// A tenant group's slice of the entry-cache share, split between its entry cache and its
/// state store's page cache: the store's comes out of the slice (half of it, between
/// `STATE_MIN_CACHE_BYTES` and 2 MiB), so 63 tenant groups no longer add 16 MiB of redb cache
/// each beyond the budget. Below 512 KiB a slice is all store cache at the minimum.
fn tenant_caches(slice: usize) -> (usize, usize) {
    let store = (slice / 2).clamp(queenmq_storage::STATE_MIN_CACHE_BYTES, 2 << 20);
    (slice.saturating_sub(store), store)
}

#[cfg(test)]
mod cache_tests {
    use super::tenant_caches;
    use queenmq_storage::STATE_MIN_CACHE_BYTES;

    #[test]
    fn a_tenant_slice_pays_for_its_store_cache() {
        assert_eq!(tenant_caches(64 << 20), ((62 << 20), 2 << 20));
        assert_eq!(tenant_caches(2 << 20), (1 << 20, 1 << 20));
        assert_eq!(tenant_caches(0), (0, STATE_MIN_CACHE_BYTES));
        for slice in [0, 1, 300 << 10, 1 << 20, 5 << 20, 1 << 30] {
            let (entries, store) = tenant_caches(slice);
            assert!(
                entries + store <= slice.max(STATE_MIN_CACHE_BYTES),
                "{slice}"
            );
        }
    }
}
