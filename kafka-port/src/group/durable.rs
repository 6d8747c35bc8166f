//! The engine side of groups: one bus call per request, its outcome checked.

use queenmq_protocol::kafka_groups::{KafkaGroupsOutcome, KafkaGroupsReq};
use queenmq_protocol::{Command, Outcome, QueenError};

use crate::{topics, Door};

pub async fn call(door: &Door, req: KafkaGroupsReq) -> Result<KafkaGroupsOutcome, QueenError> {
    match door
        .bus
        .call(door.cfg.ctx.clone(), Command::KafkaGroups(req))
        .await?
    {
        Outcome::KafkaGroups(o) => Ok(o),
        other => Err(topics::unexpected(&other)),
    }
}

/// The next generation of `group`, minted and committed by the engine.
pub async fn next_generation(
    door: &Door,
    group: &str,
    protocol_type: &str,
    protocol_name: &str,
) -> Result<i32, QueenError> {
    let req = KafkaGroupsReq::NextGeneration {
        group: group.to_string(),
        protocol_type: protocol_type.to_string(),
        protocol_name: protocol_name.to_string(),
    };
    match call(door, req).await? {
        KafkaGroupsOutcome::Generation(g) => Ok(g),
        other => Err(QueenError::new(
            queenmq_protocol::ErrorCode::Internal,
            format!("unexpected answer to a generation: {other:?}"),
        )),
    }
}
