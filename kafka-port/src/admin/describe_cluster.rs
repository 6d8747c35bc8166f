//! DescribeCluster (KIP-700): the brokers and controller Metadata names (this one broker, or
//! a cluster's members and its leader), under the cluster id Metadata gives.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use crate::connection::{encode, Reply};
use crate::metadata::CLUSTER_ID;
use crate::wire::{Malformed, Reader};
use crate::Door;

/// v0..=v2: v1 adds the endpoint type, v2 the fenced flag (never set: this broker serves).
pub const VERSIONS: std::ops::RangeInclusive<i16> = 0..=2;

/// `EndpointType.BROKER`; `CONTROLLER` (2) names a KRaft controller's listener.
const BROKER_ENDPOINT: i8 = 1;
/// Kafka's UNSUPPORTED_ENDPOINT_TYPE: a broker asked for the controllers' endpoints.
const UNSUPPORTED_ENDPOINT_TYPE: i16 = 125;
/// Kafka's "authorized operations were not asked for".
const OPS_NOT_ASKED: i32 = i32::MIN;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescribeClusterRequest {
    pub endpoint_type: i8,
}

pub fn decode(version: i16, r: &mut Reader) -> Result<DescribeClusterRequest, Malformed> {
    // No ACLs here: authorized operations are never computed, asked or not.
    let _include_cluster_authorized_operations = r.bool()?;
    let endpoint_type = if version >= 1 {
        r.i8()?
    } else {
        BROKER_ENDPOINT
    };
    if version >= 2 {
        let _include_fenced_brokers = r.bool()?;
    }
    r.skip_tags()?;
    Ok(DescribeClusterRequest { endpoint_type })
}

pub fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode(version, &mut r) {
        Ok(req) => req,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let node = BrokerId(door.cfg.node_id);
    let resp = DescribeClusterResponse::default()
        .with_endpoint_type(req.endpoint_type)
        .with_cluster_id(StrBytes::from_static_str(CLUSTER_ID))
        .with_cluster_authorized_operations(OPS_NOT_ASKED);
    let resp = if req.endpoint_type != BROKER_ENDPOINT {
        resp.with_error_code(UNSUPPORTED_ENDPOINT_TYPE)
            .with_error_message(Some(StrBytes::from_static_str(
                "this broker serves broker endpoints only; it has no separate controller",
            )))
            .with_controller_id(BrokerId(-1))
    } else {
        match door.topology() {
            None => {
                resp.with_controller_id(node)
                    .with_brokers(vec![DescribeClusterBroker::default()
                        .with_broker_id(node)
                        .with_host(StrBytes::from_string(door.cfg.advertised_host.clone()))
                        .with_port(i32::from(door.cfg.advertised_port))])
            }
            Some(t) => resp
                .with_controller_id(BrokerId(t.leader.unwrap_or(-1)))
                .with_brokers(
                    t.brokers
                        .iter()
                        .map(|b| {
                            DescribeClusterBroker::default()
                                .with_broker_id(BrokerId(b.id))
                                .with_host(StrBytes::from_string(b.host.clone()))
                                .with_port(i32::from(b.port))
                        })
                        .collect(),
                ),
        }
    };
    encode(&resp, version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::DescribeClusterRequest as KReq;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn every_served_version_decodes_what_clients_encode() {
        for v in VERSIONS {
            let req = KReq::default()
                .with_include_cluster_authorized_operations(true)
                .with_endpoint_type(if v >= 1 { 2 } else { 1 })
                .with_include_fenced_brokers(v >= 2);
            let mut buf = BytesMut::new();
            req.encode(&mut buf, v).expect("encodes");
            let mut r = Reader::new(buf.freeze(), true);
            let got = decode(v, &mut r).expect("decodes");
            assert_eq!(r.remaining(), 0, "v{v}");
            assert_eq!(got.endpoint_type, if v >= 1 { 2 } else { 1 }, "v{v}");
        }
    }
}
