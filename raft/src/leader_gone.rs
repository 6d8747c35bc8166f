//! Replaces a leader whose process is gone without waiting out openraft 0.9's follower lease.
//!
//! openraft 0.9 lets a follower that heard a committed leader campaign only after that
//! leader's lease (the election range's maximum) plus its own drawn timeout, and refuses
//! votes while the lease holds (`handle_vote_req` checks it only while the voter's vote is
//! committed): a crashed leader costs 3-4 election timeouts (docs/cluster.md "Timing").
//!
//! A killed process's sockets are closed by its kernel: the connections it opened to this
//! node end, and a connect to its cluster address is refused. A live leader, however slow,
//! frozen or cut off, never has its address refuse: its listener lives until its groups have
//! stopped (`serve_cluster` ends last in the broker's stop). So when the current leader's
//! connection ends and two connects a few milliseconds apart are both refused, this node
//! campaigns at once. That first campaign cannot win while the other survivors still hold
//! their committed votes, but it makes this node's own vote uncommitted, and the others do
//! the same as they notice. The next round, after a fresh random pause (as `election_nudge`
//! draws them, so two survivors rarely fire together), asks voters whose votes are no longer
//! committed and whose term is lower: they grant it, and a leader is known within a few
//! rounds of a heartbeat. Rounds stop once a leader is known, or after a lease, when
//! openraft's own timers and the nudge are back in charge.
//!
//! Campaigning is always safe in Raft (a vote needs a majority and an up-to-date log); what
//! the lease protected, a live leader's plans under the broker's `may_plan`, cannot exist
//! once the leader's process is gone. docs/cluster.md "Timing" holds the argument and the
//! one case that needs it (a leader process alive whose listener is closed).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use openraft::{BasicNode, Raft, RaftMetrics, ServerState};
use tokio::net::TcpStream;

use crate::election_nudge::random_pause;
use crate::types::{NodeId, TypeConfig};
use crate::vote_gate::VoteGate;

/// Between the two connects that must both be refused in a row: a peer restarted at once
/// answers the second.
const PROBE_GAP: Duration = Duration::from_millis(10);

/// Campaigns one detection calls at most (the first included); openraft's own timers and
/// `election_nudge` take over after them. Unbounded rounds let a survivor whose log is
/// behind keep raising the term over the up-to-date one, which adopts each higher term and
/// stays a follower (review s24 failover M1).
const MAX_CAMPAIGNS: u32 = 4;

/// Microseconds since this process's first call: the clock of the stamps (fine enough that a
/// connection's last append and its ending never share a tick).
fn now_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// One group's detection state, shared by the listener's connections: one detection at a
/// time, whatever number of the leader's connections end together.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// Another of the leader's connections ended while a detection ran: it probes on for
    /// another window rather than miss it (the leader's old vote connections end at any time).
    again: AtomicBool,
    /// When an append last reached this group through the listener (`now_us`, 0: never).
    /// A refused connect alone does not prove the leader's process gone (a firewall that
    /// REJECTs new connections to its port, a wrong address for it): a live leader's next
    /// append arrives on a connection it opens itself, within a heartbeat or two
    /// (review s24 failover H1).
    last_append_us: AtomicU64,
    /// When a connection of a peer last ended (`now_us`): the silence is counted from the
    /// last of the leader's connections to end, whichever detection is running.
    last_end_us: AtomicU64,
    /// The peer the running detection probes, and another peer (a newer leader) whose
    /// connection ended meanwhile: probed next rather than hidden behind the running one
    /// (review s24 failover L2).
    peers: std::sync::Mutex<(Option<NodeId>, Option<NodeId>)>,
}

impl Watch {
    /// An append reached this group (any sender: only a leader sends them).
    pub(crate) fn appended(&self) {
        self.last_append_us
            .store(now_us().max(1), Ordering::Release);
    }

    fn ended(&self) {
        self.last_end_us.store(now_us().max(1), Ordering::Release);
    }

    fn last_end(&self) -> u64 {
        self.last_end_us.load(Ordering::Acquire)
    }

    /// Whether an append reached this group after `since` (`now_us`).
    fn appended_since(&self, since: u64) -> bool {
        self.last_append_us.load(Ordering::Acquire) > since
    }

    fn peers(&self) -> std::sync::MutexGuard<'_, (Option<NodeId>, Option<NodeId>)> {
        // Two plain values: a panic elsewhere cannot leave them half-written.
        self.peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A connection of `from` ended: true when a detection of `from` starts now (none was
    /// running). One detection at a time: while one runs it probes on for this ending
    /// (`again`) when it is the same peer, else `from` (a newer leader) is probed next
    /// rather than hidden behind it (review s24 failover L2). Decided under one lock with
    /// `finish`, so no ending falls between a detection's end and the next one's start.
    fn start(&self, from: NodeId) -> bool {
        let mut p = self.peers();
        match p.0 {
            None => {
                *p = (Some(from), None);
                true
            }
            Some(running) if running == from => {
                self.again.store(true, Ordering::Release);
                false
            }
            Some(_) => {
                p.1 = Some(from);
                false
            }
        }
    }

    /// The detection of `from` ended: the peer to probe next (whose connection ended
    /// meanwhile), now the running one, or None and no detection runs.
    fn finish(&self, from: NodeId) -> Option<NodeId> {
        let mut p = self.peers();
        let mut next = p.1.take().filter(|n| *n != from);
        // An ending of `from` itself after its probing last read `again` (review s25
        // failover L2): probed once more rather than lost.
        if next.is_none() && self.again.swap(false, Ordering::AcqRel) {
            next = Some(from);
        }
        p.0 = next;
        next
    }
}

/// Held by the task running detections: a task that panics leaves none running.
struct Running(Arc<Watch>);

impl Drop for Running {
    fn drop(&mut self) {
        if std::thread::panicking() {
            *self.0.peers() = (None, None);
        }
    }
}

/// Why this node does not suspect `from`, its peer whose connection ended, or None when the
/// ending is worth a probe: `from` must be this node's leader, and this node a follower and a
/// voter among two or more that may campaign (not joining, not removed: `VoteGate`). A
/// leader, a candidate (already campaigning) and a learner never act.
pub(crate) fn refusal(
    m: &RaftMetrics<NodeId, BasicNode>,
    from: NodeId,
    may_campaign: bool,
) -> Option<&'static str> {
    if from == m.id {
        return Some("the connection was this node's own");
    }
    if m.state != ServerState::Follower {
        return Some("this node does not follow");
    }
    if m.current_leader != Some(from) {
        return Some("the peer does not lead this node");
    }
    let voters = m.membership_config.membership();
    if !voters.voter_ids().any(|v| v == m.id) {
        return Some("this node does not vote");
    }
    if voters.voter_ids().nth(1).is_none() {
        return Some("a single voter");
    }
    if !may_campaign {
        return Some("this node may not campaign (joining or removed)");
    }
    None
}

/// What one round after the first campaign does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Round {
    /// A leader is known (this node or another), in a term past the lost leader's `term`.
    Done,
    /// Still a candidate on its own behalf with no leader known: campaign again.
    Campaign,
    /// Granted another candidate's vote (or nothing to decide yet): leave that round alone.
    Wait,
}

/// The decision of one round, from the node's metrics; `term` is the lost leader's.
pub(crate) fn round(m: &RaftMetrics<NodeId, BasicNode>, term: u64) -> Round {
    if m.state == ServerState::Leader
        || (m.current_leader.is_some() && m.current_term > term)
        || m.state == ServerState::Shutdown
    {
        return Round::Done;
    }
    let self_vote = m.vote.leader_id().voted_for() == Some(m.id);
    if m.state == ServerState::Candidate && m.current_leader.is_none() && self_vote {
        return Round::Campaign;
    }
    Round::Wait
}

/// Whether a connect to `addr` is refused within `ttl` (a timeout, a success or any other
/// error is not: only the peer's kernel refuses for a process that is gone).
async fn refused(addr: &str, ttl: Duration) -> bool {
    match tokio::time::timeout(ttl, TcpStream::connect(addr)).await {
        Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        _ => false,
    }
}

/// Whether `addr` refuses two connects in a row, `PROBE_GAP` apart, within two heartbeats of
/// the first try (or of the last connection that ended meanwhile, `Watch::again`). Tried for
/// a while rather than once: a stopping `queen` ends its groups' Raft nodes (its
/// connections) a few milliseconds before its listener, and a connect that succeeds then is
/// retried a fifth of a heartbeat later.
///
/// `cap` bounds the whole probing however often `again` extends it: on a healthy but slow
/// cluster every append timeout ends a connection, and the probes must not go on without end
/// (review s24 failover L4).
async fn gone(addr: &str, heartbeat: Duration, cap: Duration, watch: &Watch) -> bool {
    watch.again.store(false, Ordering::Release);
    let hard = tokio::time::Instant::now() + cap;
    let mut until = (tokio::time::Instant::now() + heartbeat * 2).min(hard);
    let mut in_a_row = 0;
    loop {
        if refused(addr, heartbeat).await {
            in_a_row += 1;
            if in_a_row == 2 {
                return true;
            }
            tokio::time::sleep(PROBE_GAP).await;
        } else {
            in_a_row = 0;
            let now = tokio::time::Instant::now();
            if watch.again.swap(false, Ordering::AcqRel) {
                until = (now + heartbeat * 2).min(hard);
            } else if now >= until {
                return false;
            }
            tokio::time::sleep(heartbeat / 5).await;
        }
    }
}

/// Whether no append reached the group for `silence` after `ended_at` (`now_us`), waiting
/// out what is left of it. A refused address alone is not proof (`Watch::last_append_us`): a
/// live leader's retries open connections of their own and arrive within a heartbeat or two.
async fn silent(watch: &Watch, ended_at: u64, silence: Duration) -> bool {
    let waited = Duration::from_micros(now_us().saturating_sub(ended_at));
    if let Some(rest) = silence.checked_sub(waited) {
        tokio::time::sleep(rest).await;
    }
    !watch.appended_since(ended_at)
}

/// A connection from peer `from` to this node's listener ended: if `from` leads this node,
/// check in the background whether it is gone, and if so campaign as the module says.
pub(crate) fn connection_ended(
    raft: &Raft<TypeConfig>,
    gate: Option<&VoteGate>,
    watch: &Arc<Watch>,
    from: NodeId,
) {
    let may = gate.is_none_or(VoteGate::may_campaign);
    if refusal(&raft.metrics().borrow(), from, may).is_some() {
        return;
    }
    watch.ended();
    if !watch.start(from) {
        return;
    }
    let (raft, gate, watch) = (raft.clone(), gate.cloned(), watch.clone());
    tokio::spawn(async move {
        let running = Running(watch.clone());
        let mut peer = from;
        loop {
            detect(&raft, gate.as_ref(), &watch, peer).await;
            let Some(next) = watch.finish(peer) else {
                break;
            };
            peer = next;
        }
        drop(running);
    });
}

async fn detect(raft: &Raft<TypeConfig>, gate: Option<&VoteGate>, watch: &Watch, from: NodeId) {
    let may = || gate.is_none_or(VoteGate::may_campaign);
    let (term, addr) = {
        let m = raft.metrics().borrow().clone();
        // Checked again for a peer queued behind another detection (`Watch::start`).
        if refusal(&m, from, may()).is_some() {
            return;
        }
        let Some(node) = m.membership_config.membership().get_node(&from) else {
            return;
        };
        let addr = crate::member_addr::cluster_part(&node.addr).to_string();
        (m.current_term, addr)
    };
    let cfg = raft.config();
    let heartbeat = Duration::from_millis(cfg.heartbeat_interval.max(1));
    let lease = Duration::from_millis(cfg.election_timeout_max);
    let hard = tokio::time::Instant::now() + lease;
    if !gone(&addr, heartbeat, lease, watch).await {
        return;
    }
    loop {
        let end = watch.last_end();
        if silent(watch, end, heartbeat * 2).await {
            break;
        }
        // Endings and appends that keep alternating end the detection at a lease, as the
        // probing does (review s25 failover L1): openraft's own timers decide then.
        if tokio::time::Instant::now() >= hard {
            return;
        }
        // An append came after the last ending. A process being stopped sends its last ones
        // while its connections end one by one: when another ended since, count from there;
        // otherwise the leader lives.
        if watch.last_end() == end {
            tracing::info!(
                leader = from,
                "the leader's address refuses connections but its appends still arrive: not \
                 campaigning (a firewall rejecting connections to it?)"
            );
            return;
        }
    }
    // Looked at again after the probes: a leader elected meanwhile is followed, not fought.
    {
        let m = raft.metrics().borrow().clone();
        if m.current_term != term || refusal(&m, from, may()).is_some() {
            return;
        }
    }
    let me = raft.metrics().borrow().id;
    tracing::info!(
        node = me,
        leader = from,
        term,
        "the leader's connection ended and its address refuses connections: campaigning"
    );
    if raft.trigger().elect().await.is_err() {
        return; // the core stopped
    }
    let until = tokio::time::Instant::now() + lease;
    // The first pause only waits for the other survivors' first campaigns (they noticed the
    // same closed connections); later ones let a round's votes, fsynced, come back first.
    let mut settle = heartbeat / 10;
    let mut campaigns = 1;
    let mut granted = None;
    while tokio::time::Instant::now() < until && campaigns < MAX_CAMPAIGNS {
        tokio::time::sleep(settle + random_pause(me, heartbeat)).await;
        let m = raft.metrics().borrow().clone();
        let mut now = round(&m, term);
        // A vote granted to another candidate that still leads nothing a round later: that
        // candidate's log may be behind this node's (it cannot win while this node refuses
        // it), so this node campaigns rather than follow its term for ever (review s24
        // failover M1).
        if now == Round::Wait && m.current_leader.is_none() {
            let vote = (m.current_term, m.vote.leader_id().voted_for());
            if granted == Some(vote) {
                now = Round::Campaign;
            }
            granted = Some(vote);
        }
        match now {
            Round::Done => return,
            Round::Wait => {}
            Round::Campaign if !may() => return,
            Round::Campaign => {
                tracing::info!(
                    node = me,
                    "no leader yet after the lost leader: campaigning again"
                );
                if raft.trigger().elect().await.is_err() {
                    return;
                }
                campaigns += 1;
                granted = None;
            }
        }
        settle = heartbeat;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use openraft::{Membership, StoredMembership, Vote};

    use super::*;

    fn metrics(
        me: u64,
        state: ServerState,
        term: u64,
        voted_for: u64,
        leader: Option<u64>,
        voters: &[u64],
    ) -> RaftMetrics<u64, BasicNode> {
        let mut m = RaftMetrics::new_initial(me);
        m.state = state;
        m.current_term = term;
        m.vote = Vote::new(term, voted_for);
        m.current_leader = leader;
        let members = Membership::new(vec![voters.iter().copied().collect::<BTreeSet<_>>()], ());
        m.membership_config = Arc::new(StoredMembership::new(None, members));
        m
    }

    #[test]
    fn only_a_voting_follower_of_the_lost_peer_suspects_it() {
        let follower = metrics(2, ServerState::Follower, 5, 1, Some(1), &[1, 2, 3]);
        assert_eq!(refusal(&follower, 1, true), None);
        assert!(refusal(&follower, 3, true).is_some(), "not the leader");
        assert!(refusal(&follower, 2, true).is_some(), "itself");
        assert!(refusal(&follower, 1, false).is_some(), "joining or removed");
        for state in [
            ServerState::Leader,
            ServerState::Candidate,
            ServerState::Learner,
        ] {
            let m = metrics(2, state, 5, 1, Some(1), &[1, 2, 3]);
            assert!(refusal(&m, 1, true).is_some(), "{state:?}");
        }
        let learner = metrics(4, ServerState::Follower, 5, 1, Some(1), &[1, 2, 3]);
        assert!(refusal(&learner, 1, true).is_some(), "not a voter");
        let alone = metrics(2, ServerState::Follower, 5, 1, Some(1), &[2]);
        assert!(refusal(&alone, 1, true).is_some(), "a single voter");
    }

    #[test]
    fn rounds_go_on_only_while_this_node_campaigns_alone_with_no_leader() {
        // Lost leader 1 of term 5; this node is 2.
        let stuck = metrics(2, ServerState::Candidate, 6, 2, None, &[1, 2, 3]);
        assert_eq!(round(&stuck, 5), Round::Campaign);
        let granted = metrics(2, ServerState::Follower, 7, 3, None, &[1, 2, 3]);
        assert_eq!(round(&granted, 5), Round::Wait, "voted for another");
        let led = metrics(2, ServerState::Follower, 7, 3, Some(3), &[1, 2, 3]);
        assert_eq!(round(&led, 5), Round::Done);
        let leads = metrics(2, ServerState::Leader, 7, 2, Some(2), &[1, 2, 3]);
        assert_eq!(round(&leads, 5), Round::Done);
        // The lost leader still named in its own term is no new leader.
        let stale = metrics(2, ServerState::Follower, 5, 1, Some(1), &[1, 2, 3]);
        assert_eq!(round(&stale, 5), Round::Wait);
        let stopped = metrics(2, ServerState::Shutdown, 6, 2, None, &[1, 2, 3]);
        assert_eq!(round(&stopped, 5), Round::Done);
    }

    #[tokio::test]
    async fn only_a_refused_connect_counts() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().to_string();
        let ttl = Duration::from_secs(5);
        assert!(!refused(&open, ttl).await, "a listening address");
        drop(listener);
        assert!(refused(&open, ttl).await, "a closed port");
        assert!(!refused("not an address", ttl).await);
    }

    #[tokio::test]
    async fn gone_only_once_refused_twice_in_a_row_within_the_window() {
        let hb = Duration::from_millis(100);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let watch = Watch::default();
        assert!(
            !gone(&addr, hb, hb * 20, &watch).await,
            "listening all along"
        );
        // A stopping node: its listener closes a little after its connections ended.
        let closing = tokio::spawn(async move {
            tokio::time::sleep(hb / 2).await;
            drop(listener);
        });
        assert!(
            gone(&addr, hb, hb * 20, &watch).await,
            "closed within the window"
        );
        closing.await.unwrap();
    }

    /// Review s24 failover L4: endings that keep coming (`again`, each append timeout of a
    /// slow but healthy cluster) do not extend the probing past its cap. Without the cap this
    /// test never ends (the setter below runs until it is dropped).
    #[tokio::test]
    async fn endings_that_keep_coming_do_not_extend_the_probing_past_its_cap() {
        let hb = Duration::from_millis(20);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let watch = Arc::new(Watch::default());
        let w = watch.clone();
        let setter = tokio::spawn(async move {
            loop {
                w.again.store(true, Ordering::Release);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let probed =
            tokio::time::timeout(Duration::from_secs(30), gone(&addr, hb, hb * 10, &watch));
        assert_eq!(
            probed.await,
            Ok(false),
            "gave up at the cap, the leader listening"
        );
        setter.abort();
        drop(listener);
    }

    /// Review s24 failover H1: an address that refuses (a firewall's REJECT) while appends
    /// still arrive is a live leader: no campaign.
    #[tokio::test]
    async fn a_leader_whose_appends_still_arrive_is_not_gone() {
        let watch = Arc::new(Watch::default());
        let ended_at = now_us();
        assert!(silent(&watch, ended_at, Duration::from_millis(30)).await);
        let ended_at = now_us();
        let sender = watch.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            sender.appended();
        });
        assert!(!silent(&watch, ended_at, Duration::from_millis(200)).await);
        // An append before the connection ended does not count.
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(silent(&watch, now_us() + 1, Duration::ZERO).await);
    }

    #[test]
    fn one_detection_at_a_time_and_a_newer_leader_probed_next() {
        let watch = Watch::default();
        assert!(watch.start(1), "the first detection");
        assert!(
            !watch.start(1),
            "a second ending of the same peer while it runs"
        );
        assert!(
            watch.again.load(Ordering::Acquire),
            "probed on for it instead"
        );
        // Not read by the probing before it ended (review s25 failover L2): once more.
        assert_eq!(watch.finish(1), Some(1));
        assert_eq!(watch.finish(1), None);
        assert!(watch.start(1), "the next detection once it ended");
        // Review s24 failover L2: a newer leader's ending is not hidden behind it.
        assert!(!watch.start(2));
        assert_eq!(watch.finish(1), Some(2), "probed next");
        assert!(!watch.start(3), "the queued detection now runs");
        assert_eq!(watch.finish(2), Some(3));
        assert_eq!(watch.finish(3), None);
        assert!(watch.start(2));
    }
}
