//! An in-process Raft network for tests: every RPC is a call on the target's `Raft` handle in
//! the same process. Enough to make openraft replicate for real (conflicts, binary search,
//! reads of the leader's log), which `NoPeers` never lets happen.

// openraft's network trait returns `RPCError` (~130 bytes) by value; the helper returns the
// same type so `?` reaches the trait boundary without boxing and unboxing.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};

use crate::types::{NodeId, TypeConfig};

/// The nodes a test registered, by id. Clones share them.
#[derive(Clone, Default)]
pub struct Router {
    nodes: Arc<Mutex<BTreeMap<NodeId, Raft<TypeConfig>>>>,
    /// How long every vote request travels before it reaches its target.
    vote_delay: Arc<Mutex<Duration>>,
}

impl Router {
    pub fn add(&self, id: NodeId, raft: Raft<TypeConfig>) {
        self.nodes.lock().unwrap().insert(id, raft);
    }

    /// The node becomes unreachable, as if its process had gone.
    pub fn remove(&self, id: NodeId) {
        self.nodes.lock().unwrap().remove(&id);
    }

    pub fn delay_votes(&self, by: Duration) {
        *self.vote_delay.lock().unwrap() = by;
    }

    fn get(&self, id: NodeId) -> Option<Raft<TypeConfig>> {
        self.nodes.lock().unwrap().get(&id).cloned()
    }
}

pub struct Client {
    router: Router,
    target: NodeId,
}

#[derive(Debug, thiserror::Error)]
#[error("node {0} is not registered with the test router")]
struct NotRegistered(NodeId);

impl Client {
    fn raft<E: std::error::Error>(
        &self,
    ) -> Result<Raft<TypeConfig>, RPCError<NodeId, BasicNode, E>> {
        self.router
            .get(self.target)
            .ok_or_else(|| RPCError::Unreachable(Unreachable::new(&NotRegistered(self.target))))
    }

    fn remote<E: std::error::Error>(
        &self,
        e: RaftError<NodeId, E>,
    ) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
        match e {
            // A stopped core is the transport's problem from the caller's side.
            RaftError::Fatal(f) => RPCError::Network(NetworkError::new(&f)),
            e => RPCError::RemoteError(RemoteError::new(self.target, e)),
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Client;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Client {
        Client {
            router: self.clone(),
            target,
        }
    }
}

impl RaftNetwork<TypeConfig> for Client {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let raft = self.raft()?;
        raft.append_entries(rpc).await.map_err(|e| self.remote(e))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let raft = self.raft()?;
        raft.install_snapshot(rpc).await.map_err(|e| self.remote(e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let delay = *self.router.vote_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        let raft = self.raft()?;
        raft.vote(rpc).await.map_err(|e| self.remote(e))
    }
}
