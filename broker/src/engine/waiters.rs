//! Parked long-poll pops, found by index rather than by rescanning all of them:
//!
//! - by (queue, group): a push or a released lease on a queue wakes that queue's waiters only;
//! - by (namespace, task) filter: a wake of queue Q wakes the label pops whose filter Q matches
//!   (four lookups, whatever the number of queues);
//! - by deadline: each cycle answers the waiters whose deadline is near, oldest first.
//!
//! On the engine tick only waiters with a due timer are re-planned: a queue waiter when its
//! group's wake heap (lease expiries, delays, window holds) has an entry at or before now; a
//! label waiter when a timer of its group falls due in a queue its labels match. Label
//! timers are found through the state's time index of wake pushes (`State::wakes`): a tick
//! touches only the group timers that came due since the last one, whatever the number of
//! queues and parked groups. The number of waiters is capped per node, across its groups
//! (`long_poll_slots.rs`); past the cap a pop is answered 503 at once.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use queenmq_protocol::{Command, PopSource, QueenError};

use super::long_poll_slots::{GroupMembership, LongPollSlot, LongPollSlots, NoSlot};
use super::Job;
use crate::state::State;
use queenmq_engine::plan::group_name;

pub struct Waiter {
    pub job: Job,
    pub deadline: Instant,
    /// Its place under the node's cap, kept while it is re-planned and parked again.
    pub slot: LongPollSlot,
}

type LabelKey = (Option<String>, Option<String>);

enum Key {
    Queue(String, String),
    /// The label filter and the pop's group.
    Label(LabelKey, String),
}

fn key_of(job: &Job) -> Option<Key> {
    let Command::Pop(p) = &job.cmd else {
        return None;
    };
    let group = group_name(&p.group).to_string();
    Some(match &p.source {
        PopSource::Queue(q) | PopSource::Partition(q, _) => Key::Queue(q.clone(), group),
        PopSource::Labels { namespace, task } => {
            Key::Label((namespace.clone(), task.clone()), group)
        }
    })
}

struct Parked {
    waiter: Waiter,
    key: Key,
}

pub struct Waiters {
    parked: HashMap<u64, Parked>,
    next_id: u64,
    by_queue: BTreeMap<(String, String), HashSet<u64>>,
    /// Label waiters by filter, then by group name.
    by_label: HashMap<LabelKey, HashMap<String, HashSet<u64>>>,
    by_deadline: BTreeSet<(Instant, u64)>,
    slots: GroupMembership,
    /// This group's tenant: its polls count in the tenant's part of the node's cap, with the
    /// tenant's ephemeral waits (review s14 R2).
    tenant: Arc<str>,
    /// The node's sweep request this group has answered.
    swept_epoch: u64,
    /// Group and queue lookups the last tick made for label timers (tests bound it).
    label_tick_work: usize,
}

impl Waiters {
    pub fn new(slots: Arc<LongPollSlots>, tenant: Arc<str>) -> Self {
        Waiters {
            parked: HashMap::new(),
            next_id: 0,
            by_queue: BTreeMap::new(),
            by_label: HashMap::new(),
            by_deadline: BTreeSet::new(),
            swept_epoch: slots.sweep_epoch(),
            slots: slots.join(),
            tenant,
            label_tick_work: 0,
        }
    }

    /// Parked pops (the memory accounting counts them).
    pub fn len(&self) -> usize {
        self.parked.len()
    }

    /// Parks a new pop until `deadline`, or answers it 503 when the node holds `max` polls
    /// already or this group its quota.
    pub fn park(&mut self, job: Job, deadline: Instant) {
        match self.take_slot() {
            Some(slot) => self.park_holding(job, deadline, slot),
            None => {
                let _ = job.reply.send(Err(QueenError::unavailable(format!(
                    "too many long polls are waiting on this node (max_long_polls = {}, at most \
                     {} per tenant); retry later or poll without wait",
                    self.slots.slots().max(),
                    self.slots.slots().group_quota()
                ))));
            }
        }
    }

    fn take_slot(&mut self) -> Option<LongPollSlot> {
        let node = self.slots.slots().clone();
        match node.try_take_for(&self.tenant) {
            Ok(slot) => return Some(slot),
            Err(NoSlot::TenantQuota) => {}
            // Other groups may hold polls whose clients are gone.
            Err(NoSlot::NodeCap) => node.ask_sweep(),
        }
        // This group's own polls whose clients are gone give their slots back first.
        self.drop_closed();
        node.try_take_for(&self.tenant).ok()
    }

    /// Parks a pop that already holds its slot (a waiter re-planned and still empty).
    pub fn park_holding(&mut self, job: Job, deadline: Instant, slot: LongPollSlot) {
        let Some(key) = key_of(&job) else {
            let empty = super::empty_pop(&job);
            let _ = job.reply.send(empty);
            return;
        };
        let id = self.next_id;
        self.next_id += 1;
        match &key {
            Key::Queue(q, g) => {
                self.by_queue
                    .entry((q.clone(), g.clone()))
                    .or_default()
                    .insert(id);
            }
            Key::Label(l, g) => {
                self.by_label
                    .entry(l.clone())
                    .or_default()
                    .entry(g.clone())
                    .or_default()
                    .insert(id);
            }
        }
        self.by_deadline.insert((deadline, id));
        self.parked.insert(
            id,
            Parked {
                waiter: Waiter {
                    job,
                    deadline,
                    slot,
                },
                key,
            },
        );
    }

    /// Waiters to re-plan now: those of woken queues (and label pops matching them), and on a
    /// tick those whose timer is due. A tick drains the state's due timers whether or not
    /// anyone waits: a label pop parked later was planned (and saw them) just before.
    pub fn take_due(
        &mut self,
        woken: &HashSet<String>,
        ticked: bool,
        now_us: i64,
        st: &mut State,
    ) -> Vec<Waiter> {
        let due_groups = if ticked {
            st.wakes.take_due(now_us)
        } else {
            Vec::new()
        };
        let st = &*st;
        if self.parked.is_empty() || (woken.is_empty() && !ticked) {
            return Vec::new();
        }
        let mut ids: Vec<u64> = Vec::new();
        for q in woken {
            let from = (q.clone(), String::new());
            for (_, set) in self
                .by_queue
                .range(from..)
                .take_while(|((qq, _), _)| qq == q)
            {
                ids.extend(set.iter().copied());
            }
            if self.by_label.is_empty() {
                continue;
            }
            if let Some(queue) = st.queue_named(q) {
                for key in label_keys(queue) {
                    if let Some(groups) = self.by_label.get(&key) {
                        for set in groups.values() {
                            ids.extend(set.iter().copied());
                        }
                    }
                }
            }
        }
        if ticked {
            for ((q, g), set) in &self.by_queue {
                let due = st
                    .queue_named(q)
                    .and_then(|queue| queue.groups.get(g))
                    .and_then(|gid| st.groups.get(gid))
                    .and_then(|grp| grp.wake.peek())
                    .is_some_and(|std::cmp::Reverse((t, _))| *t <= now_us);
                if due {
                    ids.extend(set.iter().copied());
                }
            }
            self.label_timers_due(st, &due_groups, now_us, &mut ids);
        }
        ids.sort_unstable();
        ids.dedup();
        let mut due = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(w) = self.remove(id) {
                if !w.job.reply.is_closed() {
                    due.push(w);
                }
            }
        }
        due
    }

    /// Label waiters whose group has a timer due (`due_groups`, from the state's time
    /// index) in a queue their filter matches: per due group, its queue's four filters.
    fn label_timers_due(
        &mut self,
        st: &State,
        due_groups: &[u64],
        now_us: i64,
        ids: &mut Vec<u64>,
    ) {
        self.label_tick_work = 0;
        if self.by_label.is_empty() {
            return;
        }
        for gid in due_groups {
            self.label_tick_work += 1;
            let Some(grp) = st.groups.get(gid) else {
                continue;
            };
            // A timer a pop already handled (or of a group since replaced) wakes nobody.
            if grp
                .wake
                .peek()
                .is_none_or(|std::cmp::Reverse((t, _))| *t > now_us)
            {
                continue;
            }
            let Some(queue) = st.queues.get(&grp.queue) else {
                continue;
            };
            for key in label_keys(queue) {
                if let Some(set) = self.by_label.get(&key).and_then(|g| g.get(&grp.name)) {
                    ids.extend(set.iter().copied());
                }
            }
        }
    }

    /// Group and queue lookups the last tick made for label timers.
    #[cfg(test)]
    pub fn label_tick_work(&self) -> usize {
        self.label_tick_work
    }

    fn remove(&mut self, id: u64) -> Option<Waiter> {
        let p = self.parked.remove(&id)?;
        self.by_deadline.remove(&(p.waiter.deadline, id));
        match p.key {
            Key::Queue(q, g) => {
                let k = (q, g);
                if let Some(set) = self.by_queue.get_mut(&k) {
                    set.remove(&id);
                    if set.is_empty() {
                        self.by_queue.remove(&k);
                    }
                }
            }
            Key::Label(l, g) => {
                if let Some(groups) = self.by_label.get_mut(&l) {
                    if let Some(set) = groups.get_mut(&g) {
                        set.remove(&id);
                        if set.is_empty() {
                            groups.remove(&g);
                        }
                    }
                    if groups.is_empty() {
                        self.by_label.remove(&l);
                    }
                }
            }
        }
        Some(p.waiter)
    }

    /// Forgets waiters whose client is gone (only when the cap is reached: it walks them all).
    fn drop_closed(&mut self) {
        let closed: Vec<u64> = self
            .parked
            .iter()
            .filter(|(_, p)| p.waiter.job.reply.is_closed())
            .map(|(id, _)| *id)
            .collect();
        for id in closed {
            self.remove(id);
        }
    }

    /// Answers waiters whose deadline is within `margin` empty.
    pub fn expire(&mut self, margin: Duration) {
        let epoch = self.slots.slots().sweep_epoch();
        if epoch != self.swept_epoch {
            self.swept_epoch = epoch;
            self.drop_closed();
        }
        let limit = Instant::now() + margin;
        while let Some(&(deadline, id)) = self.by_deadline.first() {
            if deadline > limit {
                break;
            }
            if let Some(w) = self.remove(id) {
                let empty = super::empty_pop(&w.job);
                let _ = w.job.reply.send(empty);
            } else {
                self.by_deadline.remove(&(deadline, id));
            }
        }
    }

    pub fn answer_all_empty(&mut self) {
        let ids: Vec<u64> = self.parked.keys().copied().collect();
        for id in ids {
            if let Some(w) = self.remove(id) {
                let empty = super::empty_pop(&w.job);
                let _ = w.job.reply.send(empty);
            }
        }
    }
}

/// The label keys a pop parked on a queue's labels may be filed under: any namespace and
/// task, the queue's namespace, its task, or both.
fn label_keys(queue: &crate::state::model::Queue) -> [(Option<String>, Option<String>); 4] {
    let (ns, task) = (Some(queue.namespace.clone()), Some(queue.task.clone()));
    [
        (None, None),
        (ns.clone(), None),
        (None, task.clone()),
        (ns, task),
    ]
}

#[cfg(test)]
mod tests {
    use queenmq_protocol::{Outcome, PopReq, Subscription};
    use tokio::sync::oneshot;

    use super::*;
    use crate::entry::Effect;
    use crate::state::config::QueueConfig;
    use crate::state::model::{CursorRow, LeaseRow};
    use crate::state::Loc;

    const QUEUES: u64 = 2000;
    const GROUPS: u64 = 300;
    /// The engine clock's reading in these tests.
    const NOW: i64 = 1_764_700_000_000_000;

    fn label_pop(group: String) -> Command {
        Command::Pop(PopReq {
            source: PopSource::Labels {
                namespace: Some("ns".into()),
                task: None,
            },
            group: Some(group),
            batch: 1,
            partitions: 1,
            wait: true,
            timeout_ms: 30_000,
            auto_ack: false,
            subscription: Subscription::All,
            lease_seconds: None,
            autopilot: false,
            conflation: false,
            parked_echo: Default::default(),
        })
    }

    /// A lease of group `gid` on partition `pid` expiring at `expires_us`.
    fn lease(st: &mut State, gid: u64, pid: u64, expires_us: i64) {
        let row = CursorRow {
            lease: Some(LeaseRow {
                id: u128::from(gid),
                end: 1,
                expires_us,
                seconds: 60,
            }),
            ..Default::default()
        };
        st.apply(
            &Effect::CursorPut { gid, pid, row },
            0,
            Loc { index: 1, pos: 0 },
        );
    }

    #[test]
    fn a_tick_with_nothing_due_does_no_work_per_queue_or_group() {
        let loc = Loc { index: 1, pos: 0 };
        let mut st = State::default();
        for qid in 1..=QUEUES {
            let name = format!("q{qid}");
            st.apply(
                &Effect::QueueUpsert {
                    qid,
                    name: &name,
                    namespace: "ns",
                    task: "",
                    configured: true,
                    config: QueueConfig::default(),
                },
                0,
                loc,
            );
            st.apply(
                &Effect::PartitionCreate {
                    qid,
                    pid: qid,
                    name: "p",
                },
                0,
                loc,
            );
        }
        // Each group registered in one queue, holding a lease that expires in an hour: a
        // timer exists for every parked group, none is due.
        let later = NOW + 3_600_000_000;
        for gid in 1..=GROUPS {
            let name = format!("g{gid}");
            st.apply(
                &Effect::GroupRegister {
                    qid: gid,
                    gid,
                    name: &name,
                    start_from_us: i64::MIN,
                },
                0,
                loc,
            );
            lease(&mut st, gid, gid, later);
        }
        let mut waiters = Waiters::new(LongPollSlots::new(10_000), Arc::from("t"));
        let mut receivers = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        for gid in 1..=GROUPS {
            let (reply, rx) = oneshot::channel();
            receivers.push(rx);
            let job = Job {
                ctx: Default::default(),
                cmd: label_pop(format!("g{gid}")),
                reply,
            };
            waiters.park(job, deadline);
        }
        let none = HashSet::new();
        for _ in 0..3 {
            assert!(waiters.take_due(&none, true, NOW, &mut st).is_empty());
            assert_eq!(
                waiters.label_tick_work(),
                0,
                "nothing due, nothing looked up"
            );
        }
        assert_eq!(waiters.len() as u64, GROUPS);

        // One group's lease runs out: the tick looks that group up once and wakes its waiter.
        lease(&mut st, 7, 7, 1);
        let due = waiters.take_due(&none, true, NOW, &mut st);
        assert_eq!(due.len(), 1);
        let Command::Pop(p) = &due[0].job.cmd else {
            panic!("a pop was parked");
        };
        assert_eq!(p.group.as_deref(), Some("g7"));
        assert_eq!(waiters.label_tick_work(), 1);
        assert!(waiters.take_due(&none, true, NOW, &mut st).is_empty());
        assert_eq!(waiters.label_tick_work(), 0);
        assert_eq!(waiters.len() as u64, GROUPS - 1);
    }

    #[test]
    fn a_woken_queue_still_wakes_every_group_of_a_matching_filter() {
        let loc = Loc { index: 1, pos: 0 };
        let mut st = State::default();
        st.apply(
            &Effect::QueueUpsert {
                qid: 1,
                name: "q1",
                namespace: "ns",
                task: "",
                configured: true,
                config: QueueConfig::default(),
            },
            0,
            loc,
        );
        let mut waiters = Waiters::new(LongPollSlots::new(10), Arc::from("t"));
        let mut receivers = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        for g in ["a", "b", "a"] {
            let (reply, rx) = oneshot::channel();
            receivers.push(rx);
            let job = Job {
                ctx: Default::default(),
                cmd: label_pop(g.into()),
                reply,
            };
            waiters.park(job, deadline);
        }
        let woken: HashSet<String> = ["q1".to_string()].into();
        assert_eq!(waiters.take_due(&woken, false, NOW, &mut st).len(), 3);
        assert_eq!(waiters.len(), 0);
        assert!(waiters.by_label.is_empty(), "emptied indexes are removed");
    }

    fn job(group: &str) -> (Job, oneshot::Receiver<Result<Outcome, QueenError>>) {
        let (reply, rx) = oneshot::channel();
        let job = Job {
            ctx: Default::default(),
            cmd: label_pop(group.into()),
            reply,
        };
        (job, rx)
    }

    /// A group at the node's cap asks the others to forget polls whose clients are gone:
    /// one tenant's abandoned polls do not keep another tenant's out.
    #[test]
    fn the_node_cap_sweeps_abandoned_polls_of_other_groups() {
        let node = LongPollSlots::new(1);
        let mut a = Waiters::new(node.clone(), Arc::from("ta"));
        let mut b = Waiters::new(node.clone(), Arc::from("tb"));
        let deadline = Instant::now() + Duration::from_secs(60);
        let (gone, rx) = job("a");
        a.park(gone, deadline);
        drop(rx);
        let (first, mut first_rx) = job("b");
        b.park(first, deadline);
        let refused = first_rx.try_recv().expect("answered at once");
        assert!(
            refused.is_err(),
            "at the cap while a's abandoned poll holds the slot"
        );
        a.expire(Duration::ZERO); // a's next cycle: it answers the sweep request
        assert_eq!(a.len(), 0);
        let (second, _rx) = job("b");
        b.park(second, deadline);
        assert_eq!(b.len(), 1, "parked in the slot a gave back");
    }

    /// A parked poll that is re-planned and still finds nothing parks again with the slot it
    /// held, even if another group took every free slot meanwhile.
    #[test]
    fn a_re_planned_poll_keeps_its_slot() {
        let node = LongPollSlots::new(1);
        let mut a = Waiters::new(node.clone(), Arc::from("t"));
        let deadline = Instant::now() + Duration::from_secs(60);
        let (j, _rx) = job("g");
        a.park(j, deadline);
        // Taken out as take_due takes a woken waiter out (remove), to be re-planned.
        let ids: Vec<u64> = a.parked.keys().copied().collect();
        let due: Vec<Waiter> = ids.into_iter().filter_map(|id| a.remove(id)).collect();
        assert_eq!(due.len(), 1);
        assert_eq!(node.held(), 1, "the slot travels with the waiter");
        assert!(node.try_take().is_none(), "no free slot for anyone else");
        let w = due.into_iter().next().expect("one waiter");
        a.park_holding(w.job, w.deadline, w.slot);
        assert_eq!(a.len(), 1);
        assert_eq!(node.held(), 1);
    }
}
