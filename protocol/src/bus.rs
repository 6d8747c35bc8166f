//! The handle a door uses to reach the engine.

use std::future::Future;
use std::pin::Pin;

use crate::{Command, Outcome, QueenError};

/// Who asks, on whose behalf.
#[derive(Debug, Clone, Default)]
pub struct RequestCtx {
    /// Tenant of the request; `default` until tenants arrive with the cluster work.
    pub tenant: String,
    /// The verified JWT `sub`, stamped on pushed messages as `producerSub`.
    pub principal: Option<String>,
}

pub type BusFuture = Pin<Box<dyn Future<Output = Result<Outcome, QueenError>> + Send>>;

/// A command goes in, its outcome comes back once it is committed (for writes) or served.
/// Implementations apply back-pressure through bounded queues.
pub trait Bus: Send + Sync + 'static {
    fn call(&self, ctx: RequestCtx, command: Command) -> BusFuture;
}
