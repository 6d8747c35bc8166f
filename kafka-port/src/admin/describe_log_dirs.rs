//! DescribeLogDirs: the data directory is this broker's one log dir; a partition's size is
//! the bytes its retained messages hold (what retention frees), the directory's total and
//! usable bytes those of its file system.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::ErrorCode;

use super::{MAX_ASSIGNMENTS, MAX_TOPICS};
use crate::connection::{encode, Reply};
use crate::topics;
use crate::wire::{Malformed, Reader};
use crate::{errors, Door};

/// v1..=v4 (v0 is gone from Kafka 4; v4 adds the directory's total and usable bytes).
pub const VERSIONS: std::ops::RangeInclusive<i16> = 1..=4;

/// Asked partitions by topic; `None`: every partition of every topic.
pub type Asked = Option<BTreeMap<String, BTreeSet<i32>>>;

pub fn decode(r: &mut Reader) -> Result<Asked, Malformed> {
    let Some(n) = r.array_len()? else {
        r.skip_tags()?;
        return Ok(None);
    };
    if n > MAX_TOPICS {
        return Err(Malformed("too many topics in one request"));
    }
    let mut asked: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for _ in 0..n {
        let topic = r.string()?;
        let np = r.array_len()?.unwrap_or(0);
        if np > MAX_ASSIGNMENTS {
            return Err(Malformed("too many partitions for one topic"));
        }
        let parts = asked.entry(topic).or_default();
        for _ in 0..np {
            parts.insert(r.i32()?);
        }
        r.skip_tags()?;
    }
    r.skip_tags()?;
    Ok(Some(asked))
}

/// One topic's partitions as this log dir holds them; `None` when there is no such topic.
async fn topic(
    door: &Door,
    name: &str,
    only: Option<&BTreeSet<i32>>,
) -> Result<Option<DescribeLogDirsTopic>, queenmq_protocol::QueenError> {
    if !topics::valid_topic_name(name) {
        return Ok(None);
    }
    let t = match topics::lookup(door, name).await {
        Ok(t) => t,
        Err(e) if e.code == ErrorCode::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let partitions = (0..t.count)
        .filter(|i| only.is_none_or(|o| o.contains(&(*i as i32))))
        .map(|i| {
            let size = t.sizes.get(&i).copied().unwrap_or(0);
            DescribeLogDirsPartition::default()
                .with_partition_index(i as i32)
                .with_partition_size(i64::try_from(size).unwrap_or(i64::MAX))
        })
        .collect();
    Ok(Some(
        DescribeLogDirsTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_owned())))
            .with_partitions(partitions),
    ))
}

/// The file system's total and usable bytes, -1 each when it cannot be read (statvfs may
/// block on a sick disk: off the connection's task, bounded by the I/O timeout).
async fn space(door: &Door) -> (i64, i64) {
    let dir = door.cfg.log_dir.clone();
    let read = tokio::task::spawn_blocking(move || fs4::statvfs(Path::new(&dir)));
    match tokio::time::timeout(door.cfg.io_timeout, read).await {
        Ok(Ok(Ok(fs))) => (
            i64::try_from(fs.total_space()).unwrap_or(i64::MAX),
            i64::try_from(fs.available_space()).unwrap_or(i64::MAX),
        ),
        _ => (-1, -1),
    }
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let asked = match decode(&mut r) {
        Ok(a) => a,
        Err(e) => return Reply::Close(e.to_string()),
    };
    // The node's disk totals and data path are the whole node's, every tenant's: an admin's
    // (Kafka asks DESCRIBE on CLUSTER). Kafka's refusal: no result, the top-level error
    // from v3 (which has one).
    if !door.may(&queenmq_protocol::rows::STATS_REFRESH) {
        let mut resp = DescribeLogDirsResponse::default();
        if version >= 3 {
            resp = resp.with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED);
        }
        return encode(&resp, version);
    }
    let named: Vec<(String, Option<BTreeSet<i32>>)> = match asked {
        Some(a) => a.into_iter().map(|(t, p)| (t, Some(p))).collect(),
        None => match topics::names(door).await {
            Ok(all) => all.into_iter().map(|t| (t, None)).collect(),
            Err(e) => return Reply::Close(format!("listing the topics failed: {e}")),
        },
    };
    let mut out = Vec::new();
    let mut error = errors::NONE;
    for (name, only) in &named {
        match topic(door, name, only.as_ref()).await {
            Ok(Some(t)) => out.push(t),
            Ok(None) => {}
            Err(e) => {
                // The dir cannot be read now; a partial list would understate it.
                tracing::info!(topic = %name, error = %e, "kafka DescribeLogDirs failed");
                error = errors::from_queen(&e);
                out.clear();
                break;
            }
        }
    }
    let (total, usable) = if version >= 4 {
        space(door).await
    } else {
        (-1, -1)
    };
    let result = DescribeLogDirsResult::default()
        .with_error_code(error)
        .with_log_dir(StrBytes::from_string(door.cfg.log_dir.clone()))
        .with_topics(out)
        .with_total_bytes(total)
        .with_usable_bytes(usable);
    encode(
        &DescribeLogDirsResponse::default().with_results(vec![result]),
        version,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
    use kafka_protocol::messages::DescribeLogDirsRequest as KReq;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn every_served_version_decodes_what_clients_encode() {
        let t = |n: &'static str, p: Vec<i32>| {
            DescribableLogDirTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str(n)))
                .with_partitions(p)
        };
        for v in VERSIONS {
            let req = KReq::default().with_topics(Some(vec![t("a", vec![2, 0]), t("a", vec![1])]));
            let mut buf = BytesMut::new();
            req.encode(&mut buf, v).expect("encodes");
            let mut r = Reader::new(buf.freeze(), v >= 2);
            let got = decode(&mut r).expect("decodes");
            assert_eq!(r.remaining(), 0, "v{v}");
            let want: BTreeMap<String, BTreeSet<i32>> =
                [("a".to_owned(), [0, 1, 2].into_iter().collect())].into();
            assert_eq!(got, Some(want), "v{v}: repeats merge");
            let mut buf = BytesMut::new();
            KReq::default()
                .with_topics(None)
                .encode(&mut buf, v)
                .expect("encodes");
            let mut r = Reader::new(buf.freeze(), v >= 2);
            assert_eq!(decode(&mut r), Ok(None), "v{v}");
            assert_eq!(r.remaining(), 0, "v{v}");
        }
    }
}
