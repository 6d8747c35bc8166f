//! A group: one engine with its Raft node and its storage, and the supervisor that rebuilds it
//! in the process when its engine fails (a proposal that does not commit, a committed entry
//! that does not apply, a panic). The doors reach it through its job queue and its
//! [`LiveSlot`], which both outlive the group's incarnations. A node runs one group per
//! tenant ([`registry`]), the `default` one always.

pub(crate) mod checkpoint_declarations;
pub mod declaring;
pub mod dir_listing;
pub mod founding_fallback;
pub mod hosted;
pub mod open;
pub mod opened_ledger;
pub mod registry;
mod supervisor;
mod voter_addr;

#[cfg(test)]
mod declarations_wiring_tests;

use std::sync::{Arc, RwLock};

use queenmq_storage::SegmentLog;

use crate::engine::log::SharedLog;
use crate::engine::Shared;

pub use registry::{Group, Registry, RegistryOptions, TENANTS_DIR};
pub use supervisor::{start, supervise, Started, Tail};

/// What the doors and the scrape read of a group that runs.
#[derive(Clone)]
pub struct Live {
    pub shared: Arc<Shared>,
    pub log: SharedLog,
    pub segments: Arc<SegmentLog>,
    /// The group's Raft node, for the membership operations (`cluster_admin`).
    pub node: queenmq_raft::RaftNode,
}

/// The group that runs now, or why none does (it is being rebuilt, or rebuilding failed).
pub struct LiveSlot(RwLock<Slot>);

struct Slot {
    now: Result<Live, String>,
    /// The group is down for a reload after its node lost the lead: a cluster event, not a
    /// fault of the process (review s17 C2).
    reloading: bool,
}

/// Why no group runs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Down {
    pub why: String,
    /// A reload after a deposition: the node is alive (a liveness probe must not restart it
    /// in the middle of a long replay), but serves nothing until it is done.
    pub reloading: bool,
}

impl LiveSlot {
    pub fn new(live: Live) -> Arc<LiveSlot> {
        Arc::new(LiveSlot(RwLock::new(Slot {
            now: Ok(live),
            reloading: false,
        })))
    }

    /// A copy: holding it keeps that incarnation's Raft node and files alive, so hold it only
    /// while answering (the supervisor waits for the files to be let go before reopening).
    pub fn get(&self) -> Result<Live, String> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).now.clone()
    }

    /// `get`, saying whether a group that is down is reloading after a deposition.
    pub fn get_or_down(&self) -> Result<Live, Down> {
        let slot = self.0.read().unwrap_or_else(|p| p.into_inner());
        slot.now.clone().map_err(|why| Down {
            why,
            reloading: slot.reloading,
        })
    }

    pub fn set(&self, now: Result<Live, String>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Slot {
            now,
            reloading: false,
        };
    }

    /// Down for a reload after this node lost the lead (`Down::reloading`).
    pub fn set_reloading(&self, why: String) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Slot {
            now: Err(why),
            reloading: true,
        };
    }
}

#[cfg(test)]
mod core_frozen_tests;
#[cfg(test)]
mod open_tests;
#[cfg(test)]
mod registry_tests;
#[cfg(test)]
mod spill_release_tests;
#[cfg(test)]
mod supervise_late_tests;
#[cfg(test)]
mod supervise_tests;
