//! Node-to-node RPC. Today a group has one voter, so there is nobody to talk to: every client
//! answers `Unreachable`, which openraft treats as "back off and retry", never as fatal. A
//! node never builds a client to itself (openraft FAQ: replicating to oneself panics).
//!
//! A group with peers runs on `TcpNetwork` (`tcp_client`) instead, without touching the storage
//! or the node; only `RaftNode` names this type.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;

use crate::types::{NodeId, TypeConfig};

#[derive(Debug, thiserror::Error)]
#[error("node {target} is unreachable: this build has no network transport between Raft nodes yet")]
pub struct NoTransport {
    target: NodeId,
}

/// The network factory of a single-voter group.
#[derive(Debug, Default, Clone)]
pub struct NoPeers;

pub struct NoPeerClient {
    target: NodeId,
}

impl NoPeerClient {
    fn unreachable<E: std::error::Error>(&self) -> RPCError<NodeId, BasicNode, E> {
        RPCError::Unreachable(Unreachable::new(&NoTransport {
            target: self.target,
        }))
    }
}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeerClient;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> NoPeerClient {
        NoPeerClient { target }
    }
}

impl RaftNetwork<TypeConfig> for NoPeerClient {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(self.unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        Err(self.unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(self.unreachable())
    }
}
