//! The engine side of groups: one bus call per request, its outcome checked.

use queenmq_protocol::kafka_groups::{KafkaGroupsOutcome, KafkaGroupsReq};
use queenmq_protocol::{Bus, Command, Outcome, QueenError, RequestCtx};

use crate::{topics, Door};

pub async fn call(door: &Door, req: KafkaGroupsReq) -> Result<KafkaGroupsOutcome, QueenError> {
    call_as(door.bus.as_ref(), door.ctx.clone(), req).await
}

async fn call_as(
    bus: &dyn Bus,
    ctx: RequestCtx,
    req: KafkaGroupsReq,
) -> Result<KafkaGroupsOutcome, QueenError> {
    match bus.call(ctx, Command::KafkaGroups(req)).await? {
        Outcome::KafkaGroups(o) => Ok(o),
        other => Err(topics::unexpected(&other)),
    }
}

/// The next generation of `group`, minted and committed by the engine.
pub async fn next_generation(
    bus: &dyn Bus,
    ctx: RequestCtx,
    group: &str,
    protocol_type: &str,
    protocol_name: &str,
) -> Result<i32, QueenError> {
    let req = KafkaGroupsReq::NextGeneration {
        group: group.to_string(),
        protocol_type: protocol_type.to_string(),
        protocol_name: protocol_name.to_string(),
    };
    match call_as(bus, ctx, req).await? {
        KafkaGroupsOutcome::Generation(g) => Ok(g),
        other => Err(QueenError::new(
            queenmq_protocol::ErrorCode::Internal,
            format!("unexpected answer to a generation: {other:?}"),
        )),
    }
}
