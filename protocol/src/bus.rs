//! The handle a door uses to reach the engine.

use std::future::Future;
use std::pin::Pin;

use crate::command::{CommandMeta, Role};
use crate::{Command, ErrorCode, Outcome, QueenError};

/// Who asks, on whose behalf.
#[derive(Debug, Clone, Default)]
pub struct RequestCtx {
    /// Tenant of the request; `default` until tenants arrive with the cluster work.
    pub tenant: String,
    /// The verified JWT `sub`, stamped on pushed messages as `producerSub`.
    pub principal: Option<String>,
    /// What the caller may do, checked against each command's row by the bus.
    pub access: Access,
}

/// What a caller was found to be allowed. The default allows nothing: a door must say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// The door checks no identity (authentication is off, or the path is a public probe):
    /// every command is allowed.
    Open,
    /// The roles of a verified token; none grants nothing.
    Roles(Vec<Role>),
}

impl Default for Access {
    fn default() -> Self {
        Access::Roles(Vec::new())
    }
}

impl RequestCtx {
    /// Refuses a command whose row asks a role the caller does not hold.
    pub fn authorize(&self, meta: &CommandMeta) -> Result<(), QueenError> {
        match &self.access {
            Access::Open => Ok(()),
            Access::Roles(held) if held.iter().any(|r| r.grants(meta.role)) => Ok(()),
            Access::Roles(_) => Err(QueenError::new(
                ErrorCode::Forbidden,
                "Insufficient permissions",
            )),
        }
    }
}

pub type BusFuture = Pin<Box<dyn Future<Output = Result<Outcome, QueenError>> + Send>>;

/// A command goes in, its outcome comes back once it is committed (for writes) or served.
/// Implementations apply back-pressure through bounded queues.
pub trait Bus: Send + Sync + 'static {
    fn call(&self, ctx: RequestCtx, command: Command) -> BusFuture;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::rows;

    fn ctx(access: Access) -> RequestCtx {
        RequestCtx {
            access,
            ..RequestCtx::default()
        }
    }

    #[test]
    fn a_command_is_refused_unless_a_held_role_grants_its_row() {
        assert!(ctx(Access::Open).authorize(&rows::DELETE_QUEUE).is_ok());
        let writer = ctx(Access::Roles(vec![Role::WriteOnly]));
        assert!(writer.authorize(&rows::PUSH).is_ok());
        let refused = writer.authorize(&rows::POP).err().map(|e| e.code);
        assert_eq!(refused, Some(ErrorCode::Forbidden));
        let both = ctx(Access::Roles(vec![Role::WriteOnly, Role::ReadOnly]));
        assert!(both.authorize(&rows::READ).is_ok() && both.authorize(&rows::PUSH).is_ok());
        assert!(both.authorize(&rows::ACK).is_err());
        assert!(ctx(Access::Roles(vec![])).authorize(&rows::READ).is_err());
        assert!(
            RequestCtx::default().authorize(&rows::HEALTH).is_err(),
            "denied by default"
        );
    }
}
