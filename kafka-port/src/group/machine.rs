//! The classic group membership protocol as a state machine (what Kafka's GroupCoordinator
//! does): members, their join and sync waits, heartbeats and rebalances. No I/O and no clock:
//! every call is given `now` in milliseconds, and waits are oneshot channels the async shell
//! (coordinator.rs) hands back to connections. Generation ids come from the engine, so the
//! shell asks it for one when [`Groups::take_ready`] says a join phase can complete.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::errors as e;
use queenmq_protocol::kafka_groups::{MAX_KAFKA_PROTOCOL_BYTES, MAX_KAFKA_TOPIC_BYTES};

/// Kafka's `group.initial.rebalance.delay.ms` default: a group formed from empty waits this
/// long for more members before its first generation, so consumers started together share one.
pub const INITIAL_REBALANCE_DELAY_MS: u64 = 3_000;
/// Kafka's `group.min.session.timeout.ms` / `group.max.session.timeout.ms` defaults.
pub const MIN_SESSION_MS: i32 = 6_000;
pub const MAX_SESSION_MS: i32 = 1_800_000;
/// Members one group may hold (Kafka's `group.max.size` is unbounded by default; a cap here
/// bounds the coordinator's memory). Past it a join gets GROUP_MAX_SIZE_REACHED.
pub const MAX_MEMBERS: usize = 1_000;
/// Groups with members or waits one node's coordinator holds; past it a join of a new group
/// gets COORDINATOR_NOT_AVAILABLE, which clients retry.
pub const MAX_GROUPS: usize = 10_000;
/// Protocols one member may offer, and the bytes of one member's metadata or assignment.
pub const MAX_PROTOCOLS: usize = 32;
pub const MAX_MEMBER_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct JoinAnswer {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// (member id, group instance id, metadata): the leader's answer only.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl JoinAnswer {
    pub fn error(error: i16, member_id: &str) -> Self {
        JoinAnswer {
            error,
            generation: -1,
            member_id: member_id.to_string(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncAnswer {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncAnswer {
    pub fn error(error: i16) -> Self {
        SyncAnswer {
            error,
            ..Default::default()
        }
    }
}

pub enum Step<A> {
    Now(A),
    Wait(oneshot::Receiver<A>),
}

#[derive(Debug, Clone)]
pub struct JoinArgs {
    pub group: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_ms: i32,
    pub rebalance_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// v4+ first asks the client to come back with the member id it is given.
    pub require_known_member: bool,
}

#[derive(Debug)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_ms: u64,
    pub rebalance_ms: u64,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub last_seen: u64,
    join: Option<oneshot::Sender<JoinAnswer>>,
    sync: Option<oneshot::Sender<SyncAnswer>>,
}

impl Member {
    fn bytes(&self) -> usize {
        self.protocols
            .iter()
            .map(|(n, m)| n.len() + m.len())
            .sum::<usize>()
            + self.assignment.len()
    }
}

#[derive(Debug)]
pub struct Group {
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, by when they must come back.
    pending: HashMap<String, u64>,
    /// Static members: group instance id → member id.
    statics: HashMap<String, String>,
    /// The join phase completes once every member rejoined and this time passed...
    ready_at: u64,
    /// ...or at this time whoever rejoined.
    deadline: u64,
    /// A generation is being minted for this join phase.
    completing: bool,
}

impl Group {
    fn new() -> Self {
        Group {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            pending: HashMap::new(),
            statics: HashMap::new(),
            ready_at: 0,
            deadline: 0,
            completing: false,
        }
    }

    fn is_idle(&self) -> bool {
        self.members.is_empty() && self.pending.is_empty() && !self.completing
    }

    /// Whether every member offers a protocol of this type with one name in common.
    fn accepts(&self, ptype: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !ptype.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref().is_some_and(|t| t != ptype)
            && self.state != GroupState::Empty
        {
            return false;
        }
        protocols.iter().any(|(name, _)| {
            self.members
                .values()
                .all(|m| m.protocols.iter().any(|(n, _)| n == name))
        })
    }

    /// Starts (or keeps) a join phase: sync waiters learn a rebalance began.
    fn prepare_rebalance(&mut self, now: u64) {
        if self.state == GroupState::PreparingRebalance {
            return;
        }
        let from_empty = self.state == GroupState::Empty;
        for m in self.members.values_mut() {
            if let Some(w) = m.sync.take() {
                let _ = w.send(SyncAnswer::error(e::REBALANCE_IN_PROGRESS));
            }
        }
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_ms)
            .max()
            .unwrap_or(0);
        self.state = GroupState::PreparingRebalance;
        self.deadline = now.saturating_add(timeout);
        self.ready_at = if from_empty {
            now.saturating_add(INITIAL_REBALANCE_DELAY_MS.min(timeout))
        } else {
            now
        };
    }

    fn current_join(&self, member_id: &str) -> JoinAnswer {
        let leader = self.leader.clone().unwrap_or_default();
        JoinAnswer {
            error: e::NONE,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            members: if leader == member_id {
                self.member_list()
            } else {
                Vec::new()
            },
            leader,
            member_id: member_id.to_string(),
        }
    }

    fn member_list(&self) -> Vec<(String, Option<String>, Bytes)> {
        let name = self.protocol_name.as_deref().unwrap_or("");
        self.members
            .values()
            .map(|m| {
                let meta = m
                    .protocols
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, b)| b.clone())
                    .unwrap_or_default();
                (m.id.clone(), m.instance_id.clone(), meta)
            })
            .collect()
    }

    fn remove(&mut self, member_id: &str) -> Option<Member> {
        let m = self.members.remove(member_id)?;
        if let Some(i) = &m.instance_id {
            if self.statics.get(i).is_some_and(|id| id == member_id) {
                self.statics.remove(i);
            }
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
        Some(m)
    }

    /// Chooses the protocol every member supports that most members list first among those.
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let common: Vec<&str> = first
            .protocols
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(p, _)| p == n))
            })
            .collect();
        let mut votes: Vec<(usize, &str)> = common.iter().map(|n| (0, *n)).collect();
        for m in self.members.values() {
            if let Some((n, _)) = m
                .protocols
                .iter()
                .find(|(p, _)| common.contains(&p.as_str()))
            {
                if let Some(v) = votes.iter_mut().find(|(_, c)| *c == n) {
                    v.0 += 1;
                }
            }
        }
        // The earliest of the most voted (max_by_key keeps the last of equals: iterate back).
        votes
            .iter()
            .rev()
            .max_by_key(|(c, _)| *c)
            .map(|(_, n)| n.to_string())
    }
}

/// Every group this node coordinates.
#[derive(Default)]
pub struct Groups {
    groups: HashMap<String, Group>,
    next_member: u64,
    /// Makes member ids of this process differ from those of an earlier one.
    boot: u64,
}

/// Where a member-scoped request (sync, heartbeat, commit) stands.
fn check_member(g: &Group, member_id: &str, instance_id: Option<&str>) -> Result<(), i16> {
    if let Some(i) = instance_id {
        match g.statics.get(i) {
            Some(id) if id != member_id => return Err(e::FENCED_INSTANCE_ID),
            _ => {}
        }
    }
    if !g.members.contains_key(member_id) {
        return Err(e::UNKNOWN_MEMBER_ID);
    }
    Ok(())
}

impl Groups {
    pub fn new(boot: u64) -> Self {
        Groups {
            boot,
            ..Default::default()
        }
    }

    pub fn get(&self, group: &str) -> Option<&Group> {
        self.groups.get(group)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Group)> {
        self.groups.iter().map(|(k, g)| (k.as_str(), g))
    }

    fn new_member_id(&mut self, client_id: &str) -> String {
        self.next_member += 1;
        let client: String = client_id.chars().take(64).collect();
        format!("{client}-{:x}-{}", self.boot, self.next_member)
    }

    pub fn join(&mut self, a: JoinArgs, now: u64) -> Step<JoinAnswer> {
        if !(MIN_SESSION_MS..=MAX_SESSION_MS).contains(&a.session_ms) {
            return Step::Now(JoinAnswer::error(e::INVALID_SESSION_TIMEOUT, &a.member_id));
        }
        let member_bytes: usize = a.protocols.iter().map(|(n, m)| n.len() + m.len()).sum();
        if a.protocols.len() > MAX_PROTOCOLS || member_bytes > MAX_MEMBER_BYTES {
            return Step::Now(JoinAnswer::error(
                e::INCONSISTENT_GROUP_PROTOCOL,
                &a.member_id,
            ));
        }
        // The engine refuses a generation whose protocol type or name is longer, so such a
        // group could never form; refuse the join instead of minting and failing forever.
        let long_protocol = a.protocol_type.len() > MAX_KAFKA_PROTOCOL_BYTES
            || a.protocols
                .iter()
                .any(|(n, _)| n.len() > MAX_KAFKA_PROTOCOL_BYTES);
        if long_protocol {
            return Step::Now(JoinAnswer::error(
                e::INCONSISTENT_GROUP_PROTOCOL,
                &a.member_id,
            ));
        }
        if a.instance_id
            .as_ref()
            .is_some_and(|i| i.len() > MAX_KAFKA_TOPIC_BYTES)
        {
            return Step::Now(JoinAnswer::error(e::INVALID_REQUEST, &a.member_id));
        }
        if !self.groups.contains_key(&a.group) && self.groups.len() >= MAX_GROUPS {
            return Step::Now(JoinAnswer::error(
                e::COORDINATOR_NOT_AVAILABLE,
                &a.member_id,
            ));
        }
        let mut member_id = a.member_id.clone();
        // A static member back under a new id in a stable group keeps its assignment without
        // a rebalance, even as leader (Kafka's updateStaticMemberAndRebalance).
        let mut static_rejoin = false;
        let new_id = if member_id.is_empty() {
            Some(self.new_member_id(&a.client_id))
        } else {
            None
        };
        let g = self
            .groups
            .entry(a.group.clone())
            .or_insert_with(Group::new);
        if !g.accepts(&a.protocol_type, &a.protocols) {
            return Step::Now(JoinAnswer::error(
                e::INCONSISTENT_GROUP_PROTOCOL,
                &a.member_id,
            ));
        }
        if let Some(new_id) = new_id {
            match a
                .instance_id
                .as_ref()
                .and_then(|i| g.statics.get(i))
                .cloned()
            {
                // A static member back under a new id: the old id is fenced, the member kept.
                Some(old) => {
                    if let Some(mut m) = g.members.remove(&old) {
                        m.id = new_id.clone();
                        if let Some(w) = m.join.take() {
                            let _ = w.send(JoinAnswer::error(e::FENCED_INSTANCE_ID, &old));
                        }
                        if let Some(w) = m.sync.take() {
                            let _ = w.send(SyncAnswer::error(e::FENCED_INSTANCE_ID));
                        }
                        g.members.insert(new_id.clone(), m);
                    }
                    if g.leader.as_deref() == Some(old.as_str()) {
                        g.leader = Some(new_id.clone());
                    }
                    if let Some(i) = &a.instance_id {
                        g.statics.insert(i.clone(), new_id.clone());
                    }
                    member_id = new_id;
                    static_rejoin = true;
                }
                None if a.require_known_member && a.instance_id.is_none() => {
                    g.pending.insert(
                        new_id.clone(),
                        now.saturating_add(a.session_ms.max(0) as u64),
                    );
                    return Step::Now(JoinAnswer::error(e::MEMBER_ID_REQUIRED, &new_id));
                }
                None => return Self::add_member(g, new_id, a, now),
            }
        } else if g.pending.remove(&member_id).is_some() {
            return Self::add_member(g, member_id, a, now);
        }
        if let Err(code) = check_member(g, &member_id, a.instance_id.as_deref()) {
            return Step::Now(JoinAnswer::error(code, &member_id));
        }
        let Some(m) = g.members.get_mut(&member_id) else {
            return Step::Now(JoinAnswer::error(e::UNKNOWN_MEMBER_ID, &member_id));
        };
        let same = m.protocols == a.protocols;
        m.protocols = a.protocols;
        m.session_ms = a.session_ms.max(0) as u64;
        m.rebalance_ms = a.rebalance_ms.max(0) as u64;
        m.last_seen = now;
        let is_leader = g.leader.as_deref() == Some(member_id.as_str()) && !static_rejoin;
        match g.state {
            GroupState::Stable | GroupState::CompletingRebalance if same && !is_leader => {
                Step::Now(g.current_join(&member_id))
            }
            GroupState::CompletingRebalance if same => Step::Now(g.current_join(&member_id)),
            _ => {
                g.prepare_rebalance(now);
                Self::wait_join(g, &member_id)
            }
        }
    }

    fn add_member(g: &mut Group, id: String, a: JoinArgs, now: u64) -> Step<JoinAnswer> {
        if g.members.len() >= MAX_MEMBERS {
            return Step::Now(JoinAnswer::error(e::GROUP_MAX_SIZE_REACHED, &id));
        }
        if let Some(i) = &a.instance_id {
            g.statics.insert(i.clone(), id.clone());
        }
        if g.members.is_empty() {
            g.protocol_type = Some(a.protocol_type.clone());
        }
        let m = Member {
            id: id.clone(),
            instance_id: a.instance_id,
            client_id: a.client_id,
            client_host: a.client_host,
            session_ms: a.session_ms.max(0) as u64,
            rebalance_ms: a.rebalance_ms.max(0) as u64,
            protocols: a.protocols,
            assignment: Bytes::new(),
            last_seen: now,
            join: None,
            sync: None,
        };
        let rebalance_ms = m.rebalance_ms;
        g.members.insert(id.clone(), m);
        if g.state == GroupState::PreparingRebalance {
            // A newcomer to a forming group: the initial delay restarts, within the timeout.
            if g.ready_at > now {
                g.ready_at = now
                    .saturating_add(INITIAL_REBALANCE_DELAY_MS.min(rebalance_ms))
                    .min(g.deadline);
            }
            g.deadline = g.deadline.max(now.saturating_add(rebalance_ms));
        }
        g.prepare_rebalance(now);
        Self::wait_join(g, &id)
    }

    fn wait_join(g: &mut Group, member_id: &str) -> Step<JoinAnswer> {
        let (tx, rx) = oneshot::channel();
        if let Some(m) = g.members.get_mut(member_id) {
            // A second join from the same member replaces the first wait (Kafka answers the
            // older one with the same result; the client only reads the newer).
            if let Some(old) = m.join.replace(tx) {
                let _ = old.send(JoinAnswer::error(e::REBALANCE_IN_PROGRESS, member_id));
            }
        }
        Step::Wait(rx)
    }

    /// Groups whose join phase can complete now, with the protocol the generation records;
    /// each is marked completing until [`Groups::complete_join`] (or [`Groups::abort_join`]).
    pub fn take_ready(&mut self, now: u64) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for (name, g) in &mut self.groups {
            if g.state != GroupState::PreparingRebalance || g.completing {
                continue;
            }
            let all_in = g.members.values().all(|m| m.join.is_some());
            if (all_in && now >= g.ready_at) || now >= g.deadline {
                g.completing = true;
                let joined: Vec<String> = g
                    .members
                    .values()
                    .filter(|m| m.join.is_none())
                    .map(|m| m.id.clone())
                    .collect();
                // Who did not rejoin in time leaves (Kafka removes them the same way).
                for id in joined {
                    g.remove(&id);
                }
                let ptype = g.protocol_type.clone().unwrap_or_default();
                let pname = g.select_protocol().unwrap_or_default();
                out.push((name.clone(), ptype, pname));
            }
        }
        out
    }

    /// Ends a join phase with `generation` (minted by the engine): every waiting member gets
    /// its answer, the leader with the member list.
    pub fn complete_join(&mut self, group: &str, generation: i32, now: u64) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        g.completing = false;
        g.generation = generation;
        // Members that went away while the generation was minted are not part of it.
        let gone: Vec<String> = g
            .members
            .values()
            .filter(|m| m.join.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in gone {
            g.remove(&id);
        }
        if g.members.is_empty() {
            g.state = GroupState::Empty;
            g.protocol_name = None;
            g.leader = None;
            return;
        }
        g.protocol_name = g.select_protocol();
        if g.leader.as_ref().is_none_or(|l| !g.members.contains_key(l)) {
            g.leader = g.members.keys().next().cloned();
        }
        g.state = GroupState::CompletingRebalance;
        let ids: Vec<String> = g.members.keys().cloned().collect();
        for id in ids {
            let answer = g.current_join(&id);
            if let Some(m) = g.members.get_mut(&id) {
                m.last_seen = now;
                m.assignment = Bytes::new();
                if let Some(w) = m.join.take() {
                    let _ = w.send(answer);
                }
            }
        }
    }

    /// The generation could not be minted (the engine refused it: memory, disk, tenant
    /// caps): the waiting members are answered `code` now rather than parked while the mint
    /// is retried every tick, and the join phase stays open, so their retries (with the
    /// clients' backoff) form it again; a member that does not come back leaves at the
    /// phase's deadline as any other.
    pub fn abort_join(&mut self, group: &str, code: i16) {
        if let Some(g) = self.groups.get_mut(group) {
            g.completing = false;
            for m in g.members.values_mut() {
                if let Some(w) = m.join.take() {
                    let _ = w.send(JoinAnswer::error(code, &m.id));
                }
            }
        }
    }

    pub fn sync(
        &mut self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        now: u64,
    ) -> Step<SyncAnswer> {
        let Some(g) = self.groups.get_mut(group) else {
            return Step::Now(SyncAnswer::error(e::UNKNOWN_MEMBER_ID));
        };
        if let Err(code) = check_member(g, member_id, instance_id) {
            return Step::Now(SyncAnswer::error(code));
        }
        if generation != g.generation {
            return Step::Now(SyncAnswer::error(e::ILLEGAL_GENERATION));
        }
        let answer = |g: &Group, m: &Member| SyncAnswer {
            error: e::NONE,
            protocol_type: g.protocol_type.clone(),
            protocol_name: g.protocol_name.clone(),
            assignment: m.assignment.clone(),
        };
        match g.state {
            GroupState::Empty => Step::Now(SyncAnswer::error(e::UNKNOWN_MEMBER_ID)),
            GroupState::PreparingRebalance => {
                Step::Now(SyncAnswer::error(e::REBALANCE_IN_PROGRESS))
            }
            GroupState::Stable => {
                if let Some(m) = g.members.get_mut(member_id) {
                    m.last_seen = now;
                }
                match g.members.get(member_id) {
                    Some(m) => Step::Now(answer(g, m)),
                    None => Step::Now(SyncAnswer::error(e::UNKNOWN_MEMBER_ID)),
                }
            }
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                if let Some(m) = g.members.get_mut(member_id) {
                    m.last_seen = now;
                    if let Some(old) = m.sync.replace(tx) {
                        let _ = old.send(SyncAnswer::error(e::REBALANCE_IN_PROGRESS));
                    }
                }
                if g.leader.as_deref() == Some(member_id) {
                    let mut given: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for m in g.members.values_mut() {
                        m.assignment = given.remove(&m.id).unwrap_or_default();
                    }
                    g.state = GroupState::Stable;
                    let ids: Vec<String> = g.members.keys().cloned().collect();
                    for id in ids {
                        let Some(m) = g.members.get(&id) else {
                            continue;
                        };
                        let a = answer(g, m);
                        if let Some(w) = g.members.get_mut(&id).and_then(|m| m.sync.take()) {
                            let _ = w.send(a);
                        }
                    }
                }
                Step::Wait(rx)
            }
        }
    }

    pub fn heartbeat(
        &mut self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        now: u64,
    ) -> i16 {
        let Some(g) = self.groups.get_mut(group) else {
            return e::UNKNOWN_MEMBER_ID;
        };
        if let Err(code) = check_member(g, member_id, instance_id) {
            return code;
        }
        if generation != g.generation {
            return e::ILLEGAL_GENERATION;
        }
        if let Some(m) = g.members.get_mut(member_id) {
            m.last_seen = now;
        }
        match g.state {
            GroupState::Empty => e::UNKNOWN_MEMBER_ID,
            GroupState::PreparingRebalance => e::REBALANCE_IN_PROGRESS,
            GroupState::CompletingRebalance | GroupState::Stable => e::NONE,
        }
    }

    /// One member leaves (by member id, or by instance id when the member id is empty).
    pub fn leave(
        &mut self,
        group: &str,
        member_id: &str,
        instance_id: Option<&str>,
        now: u64,
    ) -> i16 {
        let Some(g) = self.groups.get_mut(group) else {
            return e::UNKNOWN_MEMBER_ID;
        };
        let id = match (member_id, instance_id) {
            ("", Some(i)) => match g.statics.get(i) {
                Some(id) => id.clone(),
                None => return e::UNKNOWN_MEMBER_ID,
            },
            (id, Some(i)) if g.statics.get(i).is_some_and(|s| s != id) => {
                return e::FENCED_INSTANCE_ID
            }
            (id, _) => id.to_string(),
        };
        let Some(mut m) = g.remove(&id) else {
            return e::UNKNOWN_MEMBER_ID;
        };
        if let Some(w) = m.join.take() {
            let _ = w.send(JoinAnswer::error(e::UNKNOWN_MEMBER_ID, &id));
        }
        Self::after_removal(g, now);
        e::NONE
    }

    fn after_removal(g: &mut Group, now: u64) {
        match g.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                if g.members.is_empty() {
                    g.state = GroupState::Empty;
                    g.leader = None;
                } else {
                    g.prepare_rebalance(now);
                }
            }
            // The join phase may now be complete: take_ready sees it.
            GroupState::PreparingRebalance | GroupState::Empty => {}
        }
    }

    /// Session timeouts: a member not heard from within its session leaves. A member waiting
    /// on its join or sync is not timed out by its session (the rebalance timeout applies).
    pub fn expire(&mut self, now: u64) {
        for g in self.groups.values_mut() {
            g.pending.retain(|_, by| *by > now);
            let late: Vec<String> = g
                .members
                .values()
                .filter(|m| {
                    m.join.is_none()
                        && m.sync.is_none()
                        && now.saturating_sub(m.last_seen) > m.session_ms
                })
                .map(|m| m.id.clone())
                .collect();
            if late.is_empty() {
                continue;
            }
            for id in late {
                g.remove(&id);
            }
            Self::after_removal(g, now);
        }
        self.groups
            .retain(|_, g| !g.is_idle() || g.state != GroupState::Empty);
    }

    /// Whether an OffsetCommit with these ids may be stored (Kafka's rules): `Ok` or the
    /// error every partition of the commit gets.
    pub fn may_commit(
        &mut self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        now: u64,
    ) -> Result<(), i16> {
        let Some(g) = self.groups.get_mut(group) else {
            // No live group here: a standalone commit, or a member of a group this node
            // forgot (a restart) who must rejoin.
            return if generation < 0 {
                Ok(())
            } else {
                Err(e::ILLEGAL_GENERATION)
            };
        };
        if generation < 0 && g.state == GroupState::Empty {
            return Ok(());
        }
        if g.state == GroupState::CompletingRebalance {
            return Err(e::REBALANCE_IN_PROGRESS);
        }
        check_member(g, member_id, instance_id)?;
        if generation != g.generation {
            return Err(e::ILLEGAL_GENERATION);
        }
        if let Some(m) = g.members.get_mut(member_id) {
            m.last_seen = now;
        }
        Ok(())
    }

    /// Whether `group` has members (DeleteGroups refuses those).
    pub fn has_members(&self, group: &str) -> bool {
        self.groups
            .get(group)
            .is_some_and(|g| !g.members.is_empty())
    }

    /// What the members hold, for the memory gauge.
    pub fn bytes(&self) -> usize {
        self.groups
            .iter()
            .map(|(k, g)| k.len() + g.members.values().map(Member::bytes).sum::<usize>())
            .sum()
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
pub(super) mod tests;
