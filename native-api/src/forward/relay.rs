//! The relay of one request to the leader and of its answer back.
//!
//! Bounds: at most `max_inflight` relayed requests at once (503 `unavailable` past it), of
//! which long polls take at most half (a long poll holds its slot for its whole wait: parked
//! polls through one follower must not turn its pushes away, review s19 forward M2, nor open
//! more connections to the leader than the cap, review s20 lead C1); the request body is read
//! as a local handler reads it (`max_body_bytes`, `http_body_timeout_ms`), before a slot is
//! taken, so a slow upload holds none; the connection to the leader within
//! `connect_timeout`; its answer head within the answer margin plus the long poll the request
//! asks for. The answer body has no size cap of its own: the leader has already done the
//! request (an autoAck pop has consumed what it answers), so refusing it here would lose it;
//! it is streamed through in chunks, not buffered, and counted as any answer is
//! (`crate::answer`), which is what bounds its memory. The in-flight slot is held until the
//! answer has been handed on whole. The request body is charged to the connections' share of
//! the memory budget (`ConnectionMeter`, as answers are) frame by frame as it arrives (by its
//! buffer's capacity), and for the relay's whole life; when the share is over, 503
//! `unavailable` (retry), the rest unread, the connection closed and nothing relayed.
//!
//! Failures: a leader that cannot be connected to has not seen the request: 503
//! `not_leader` naming it, as before forwarding existed (the client may retry on any node).
//! Once the request may have been sent, a lost connection or an answer too late is 503
//! `unavailable` saying the request "may or may not be done", as a deposed leader's answer
//! words it: a retry may repeat it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use queenmq_protocol::{LeaderHint, QueenError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::decide::{answer_timeout, relayed_headers, Leader, CARRIED, RELAYED_ANSWER_HEADERS};
use super::{ForwardOptions, LeaderLookup};
use crate::error::ApiError;
use crate::meter::ConnectionMeter;

/// Idle connections to the leader are closed before the leader's own idle timeout would close
/// them under a request just sent on one (a write relayed on a connection the leader is closing
/// is answered "may or may not be done"): at most this, and at most half of the idle timeout,
/// which is taken to be this node's own (one configuration for all members, as `relay_cap`
/// assumes; review s19 forward L2).
const POOL_IDLE_MAX: Duration = Duration::from_secs(30);

/// How long a pooled connection to the leader may stay idle, given the leader's idle timeout.
pub(super) fn pool_idle(leader_idle: Duration) -> Duration {
    POOL_IDLE_MAX.min(leader_idle / 2)
}

/// Every outcome of a relay, the label of `queen_forwarded_requests_total`.
const OUTCOMES: [&str; 5] = ["relayed", "unreachable", "lost", "timeout", "busy"];

/// The process's one client to the leader, shared by every connection of the door.
#[derive(Debug)]
pub(crate) struct Forwarder {
    node_id: u64,
    leaders: Arc<dyn LeaderLookup>,
    client: Client<HttpConnector, Full<Bytes>>,
    pub(super) inflight: Arc<Semaphore>,
    /// The share of `inflight` relayed long polls may hold: half of it.
    pub(super) polls: Arc<Semaphore>,
    max_inflight: usize,
    answer_margin: Duration,
    max_body: usize,
    body_timeout: Duration,
    meter: Option<Arc<dyn ConnectionMeter>>,
}

/// Why a relay gave up, each with its answer and its outcome label.
#[derive(Debug)]
enum Failure {
    /// The request never left this node.
    Unreachable(String),
    /// The request may have reached the leader.
    Lost(String),
    Timeout(Duration),
}

/// Every outcome's series at zero, on every node: a single node exports it too, so a scrape
/// (and the test of docs/metrics.md) sees one set of series whatever the node's role.
pub(crate) fn register_series() {
    for outcome in OUTCOMES {
        metrics::counter!("queen_forwarded_requests_total", "outcome" => outcome).increment(0);
    }
}

impl Forwarder {
    pub(crate) fn new(
        opts: &ForwardOptions,
        max_body: usize,
        body_timeout: Duration,
        leader_idle: Duration,
        meter: Option<Arc<dyn ConnectionMeter>>,
    ) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(opts.connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(pool_idle(leader_idle))
            .pool_max_idle_per_host(opts.max_inflight)
            .build(connector);
        let max_inflight = opts.max_inflight.clamp(1, Semaphore::MAX_PERMITS);
        Forwarder {
            node_id: opts.node_id,
            leaders: opts.leaders.clone(),
            client,
            inflight: Arc::new(Semaphore::new(max_inflight)),
            polls: Arc::new(Semaphore::new((max_inflight / 2).max(1))),
            max_inflight,
            answer_margin: opts.answer_margin,
            max_body,
            body_timeout,
            meter,
        }
    }

    pub(crate) fn leader_of(&self, tenant: &str) -> Leader {
        self.leaders.leader_of(tenant)
    }

    /// Relays `req` to node `id` at `url` and answers with what the leader answered.
    #[cfg(test)]
    pub(crate) async fn relay(
        &self,
        req: axum::extract::Request,
        id: u64,
        url: String,
    ) -> Response {
        let (parts, body) = req.into_parts();
        match self.read(&parts.headers, body, id).await {
            Ok(read) => self.send(parts, read, id, url, false).await,
            Err(refused) => refused,
        }
    }

    /// Reads the request body to relay, charged as it arrives, frame by frame, so uploads
    /// being read for relays at once are bounded by the share, and an upload that sends
    /// nothing holds nothing (review s20 lead C2; s21 lead B1: charging the declared length
    /// up front let a few idle uploads hold the share). `id` names the leader in a refusal.
    pub(crate) async fn read(
        &self,
        headers: &axum::http::HeaderMap,
        body: Body,
        id: u64,
    ) -> Result<ReadBody, Response> {
        let mut charge = Charge {
            meter: self.meter.clone(),
            bytes: 0,
        };
        let bytes = self.read_charged(headers, body, &mut charge, id).await?;
        Ok(ReadBody { bytes, charge })
    }

    /// Relays a request whose body was [`Self::read`] to node `id` at `url` and answers with
    /// what the leader answered. `carried`: a membership carry's own step, marked [`CARRIED`]
    /// (only here: a client's request never carries the mark on).
    pub(crate) async fn send(
        &self,
        parts: axum::http::request::Parts,
        read: ReadBody,
        id: u64,
        url: String,
        carried: bool,
    ) -> Response {
        let ReadBody { bytes, charge } = read;
        let wait = answer_timeout(parts.uri.path(), parts.uri.query(), self.answer_margin);
        let long_poll = wait > self.answer_margin;
        let poll_slot = match long_poll {
            false => None,
            true => match self.polls.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    return self.busy(format!(
                        "{} long polls are being relayed to the leader (node {id}) already, \
                         the most this node relays at once (half of forward_max_inflight); \
                         retry, or send to the leader",
                        self.polls_max()
                    ))
                }
            },
        };
        let Ok(slot) = self.inflight.clone().try_acquire_owned() else {
            return self.busy(format!(
                "{} requests are being relayed to the leader (node {id}) already, the most this \
                 node relays at once (forward_max_inflight); retry, or send to the leader",
                self.max_inflight
            ));
        };
        let permit = Slots {
            _all: slot,
            _poll: poll_slot,
        };
        let path_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let hint = LeaderHint {
            id,
            url: Some(url.clone()),
        };
        let target = match format!("{url}{path_query}").parse::<Uri>() {
            Ok(u) => u,
            Err(e) => return self.failed(Failure::Unreachable(e.to_string()), hint),
        };
        let mut out = hyper::Request::new(Full::new(bytes));
        *out.method_mut() = parts.method;
        *out.uri_mut() = target;
        *out.headers_mut() = relayed_headers(&parts.headers, self.node_id);
        if carried {
            out.headers_mut()
                .insert(CARRIED, axum::http::HeaderValue::from_static("1"));
        }
        let answer = match tokio::time::timeout(wait, self.client.request(out)).await {
            Err(_) => Err(Failure::Timeout(wait)),
            Ok(Err(e)) if e.is_connect() => Err(Failure::Unreachable(chain(&e))),
            Ok(Err(e)) => Err(Failure::Lost(chain(&e))),
            Ok(Ok(a)) => Ok(a),
        };
        let answer = match answer {
            Ok(a) => a,
            Err(f) => return self.failed(f, hint),
        };
        let (head, incoming) = answer.into_parts();
        count("relayed");
        // No cap on its size (module doc). The slot rides with the body: it is free once the
        // answer was handed on or dropped.
        let body = Slotted {
            inner: incoming,
            _slot: permit,
            _charge: charge,
        };
        let mut resp = Response::new(Body::new(body));
        *resp.status_mut() = head.status;
        for name in RELAYED_ANSWER_HEADERS {
            if let Some(v) = head.headers.get(&name) {
                resp.headers_mut().insert(name, v.clone());
            }
        }
        resp
    }

    fn polls_max(&self) -> usize {
        (self.max_inflight / 2).max(1)
    }

    /// The request body within `max_body_bytes` and the body timeout (413, 408 as a local
    /// handler answers), each frame charged to `charge` as it is kept (by the buffer's
    /// capacity); past the share 503 `unavailable`, the rest unread and the connection closed.
    async fn read_charged(
        &self,
        headers: &axum::http::HeaderMap,
        mut body: Body,
        charge: &mut Charge,
        id: u64,
    ) -> Result<Bytes, Response> {
        if declared_len(headers).is_some_and(|l| l > self.max_body) {
            return Err(unread(
                crate::body::too_large(self.max_body).into_response(),
            ));
        }
        let read = async {
            let mut buf = bytes::BytesMut::new();
            while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
                let frame = frame
                    .map_err(|e| unread(ApiError::bad(format!("bad body: {e}")).into_response()))?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if buf.len().saturating_add(data.len()) > self.max_body {
                    return Err(unread(
                        crate::body::too_large(self.max_body).into_response(),
                    ));
                }
                buf.extend_from_slice(&data);
                if !charge.resize(buf.capacity()) {
                    return Err(unread(self.body_refused(buf.len(), id)));
                }
            }
            Ok(buf.freeze())
        };
        match tokio::time::timeout(self.body_timeout, read).await {
            Ok(r) => r,
            Err(_) => Err(unread(
                crate::body::too_slow(self.body_timeout).into_response(),
            )),
        }
    }

    fn body_refused(&self, bytes: usize, id: u64) -> Response {
        self.busy(format!(
            "the request body ({bytes} bytes so far) cannot be held for the relay to the \
             leader (node {id}): the connections' share of the memory budget \
             (memory_limit_bytes) is full; retry later, or send to the leader"
        ))
    }

    fn busy(&self, why: String) -> Response {
        count("busy");
        ApiError(QueenError::unavailable(why)).into_response()
    }

    fn failed(&self, f: Failure, hint: LeaderHint) -> Response {
        let id = hint.id;
        let (outcome, e) = match f {
            Failure::Unreachable(why) => {
                tracing::debug!(leader = id, error = %why, "the leader is unreachable");
                ("unreachable", QueenError::not_leader(Some(hint)))
            }
            Failure::Lost(why) => (
                "lost",
                QueenError::unavailable(format!(
                    "the connection to the leader (node {id}) was lost after the request was \
                     sent ({why}): the request may or may not be done; retry"
                )),
            ),
            Failure::Timeout(wait) => (
                "timeout",
                QueenError::unavailable(format!(
                    "the leader (node {id}) did not answer within {} ms: the request may or \
                     may not be done; retry",
                    wait.as_millis()
                )),
            ),
        };
        count(outcome);
        ApiError(e).into_response()
    }
}

/// The leader's answer body with the in-flight slot it holds. It keeps the leader's size
/// hint (its declared length), which the door's answer counting charges up front and hyper
/// sends on as the length.
struct Slotted {
    inner: Incoming,
    _slot: Slots,
    _charge: Charge,
}

/// A relay's slot among all, and among the long polls when it is one.
struct Slots {
    _all: OwnedSemaphorePermit,
    _poll: Option<OwnedSemaphorePermit>,
}

/// A request body read for a relay, counted in the connections' pool until dropped.
pub(crate) struct ReadBody {
    pub(crate) bytes: Bytes,
    charge: Charge,
}

/// A relayed request body's bytes, counted in the connections' pool until dropped.
struct Charge {
    meter: Option<Arc<dyn ConnectionMeter>>,
    bytes: usize,
}

impl Charge {
    /// Counts `bytes` instead of what was counted; false when that leaves the pool over its
    /// share (the count stands: dropping the charge gives it back).
    fn resize(&mut self, bytes: usize) -> bool {
        let Some(m) = &self.meter else {
            return true;
        };
        m.answer(bytes, true);
        m.answer(self.bytes, false);
        self.bytes = bytes;
        !m.over_share()
    }
}

/// A refusal sent with the rest of the body unread: the client must not reuse the connection.
fn unread(resp: Response) -> Response {
    super::close_if_unread(resp, true)
}

/// The body length the request declares, if any.
fn declared_len(headers: &axum::http::HeaderMap) -> Option<usize> {
    headers
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse::<u64>()
        .ok()
        .map(|l| usize::try_from(l).unwrap_or(usize::MAX))
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(m) = &self.meter {
            m.answer(self.bytes, false);
        }
    }
}

impl HttpBody for Slotted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner)
            .poll_frame(cx)
            .map_err(axum::Error::new)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn count(outcome: &'static str) {
    metrics::counter!("queen_forwarded_requests_total", "outcome" => outcome).increment(1);
}

/// An error with its causes, for the answer (hyper's top-level text alone says little).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
