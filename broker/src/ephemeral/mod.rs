//! Ephemeral (RAM) queues (spec native-api §2.16): contents in this process only, per tenant;
//! declarations replicated through the engine (effects 63, 64) and told to the store by the
//! HTTP door. A fresh random incarnation per process start makes ids of earlier processes
//! answer `stale`.

mod due;
mod gates;
mod heads;
mod ring;
mod rings;
mod store;
mod sweep;

pub use store::{Store, StoreLimits};
pub use sweep::spawn_sweeper;
