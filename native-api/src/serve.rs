//! The accept loop: one hyper HTTP/1 connection per accepted socket, at most
//! `max_connections` at once, each with the deadlines of [`crate::timed_io`].
//!
//! Past the connection limit the loop stops accepting until a connection ends: new clients
//! wait in the kernel's listen backlog (and past that, their SYNs are dropped and retried by
//! their TCP stack) instead of being accepted and turned away. Every held connection is bounded
//! by the header, idle and body timeouts, so the wait ends once those expire.
//!
//! A few more slots (`probe_reserve`) are kept for the orchestrator's probes, so a flood of
//! idle connections does not make the node look dead: a connection accepted into one of them
//! serves exactly one request, with a short header timeout, and only `/health`, `/ready` and
//! the metrics; anything else is answered 503 with Retry-After.
//!
//! Answers are counted until hyper has taken them, and bound what new requests are served
//! (`crate::answer`): a slow reader cannot make the node hold answers without limit. Big
//! answers reserved room before being built (`crate::reserve`); it is given back here.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use queenmq_protocol::QueenError;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::Service;

use crate::answer::{self, Answers};
use crate::error::ApiError;
use crate::meter::{ConnectionMeter, Metered, What};
use crate::reserve::Reserved;
use crate::timed_io::{Activity, TimedIo, Timeouts};
use crate::tls_stream::Stream;

/// Paths a reserved slot serves: what liveness/readiness probes and scrapers ask for.
const PROBE_PATHS: [&str; 4] = ["/health", "/ready", "/metrics", "/metrics/prometheus"];
/// A probe sends its request at once; a reserved slot held silent is freed after this.
const PROBE_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) struct DoorLimits {
    pub timeouts: Timeouts,
    pub max_connections: usize,
    pub probe_reserve: usize,
    pub meter: Option<Arc<dyn ConnectionMeter>>,
    /// Shared with the handlers, which reserve room for big answers against it.
    pub answers: Arc<Answers>,
    /// Set when the listener speaks TLS (`tls_cert_file`).
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

enum Slot {
    General(#[allow(dead_code)] OwnedSemaphorePermit),
    Probe(#[allow(dead_code)] OwnedSemaphorePermit),
}

pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: DoorLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // The series exist from the start (docs/metrics.md lists it; a scrape shows it).
    metrics::counter!("queen_http_connections_refused_total").increment(0);
    metrics::counter!("queen_streams_state_refused_total").increment(0);
    let general = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let reserve = Arc::new(Semaphore::new(limits.probe_reserve));
    let graceful = GracefulShutdown::new();
    let answers = limits.answers.clone();
    let mut http = hyper::server::conn::http1::Builder::new();
    // The deadlines live in TimedIo; hyper's header timer would also run on idle keep-alive.
    http.header_read_timeout(None).keep_alive(true);
    let mut probe_http = http.clone();
    probe_http.keep_alive(false);
    let mut probe_timeouts = limits.timeouts;
    probe_timeouts.header = probe_timeouts.header.min(PROBE_HEADER_TIMEOUT);
    let mut shutdown = std::pin::pin!(shutdown);
    // One warning per run of failed accepts (EMFILE under a flood repeats every 50 ms).
    let mut accept_failing = false;
    loop {
        let slot = tokio::select! {
            biased;
            () = &mut shutdown => break,
            p = general.clone().acquire_owned() => match p {
                Ok(p) => Slot::General(p),
                Err(_) => break,
            },
            p = reserve.clone().acquire_owned(), if limits.probe_reserve > 0 => match p {
                Ok(p) => Slot::Probe(p),
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _peer)) => {
                    accept_failing = false;
                    stream
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    if !accept_failing {
                        tracing::warn!(
                            error = %e,
                            "accept failed; retrying every 50 ms (is http_max_connections above the open-file limit?)"
                        );
                    }
                    accept_failing = true;
                    drop(slot);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // A general slot may have freed while a reserved one waited in accept.
        let slot = match slot {
            Slot::Probe(p) => match general.clone().try_acquire_owned() {
                Ok(g) => {
                    drop(p);
                    Slot::General(g)
                }
                Err(_) => Slot::Probe(p),
            },
            general_slot => general_slot,
        };
        let probe_only = matches!(slot, Slot::Probe(_));
        let metered = Metered::begin(&limits.meter, What::Connection);
        let activity = Arc::new(Activity::default());
        let timeouts = if probe_only {
            probe_timeouts
        } else {
            limits.timeouts
        };
        let io_activity = activity.clone();
        let router = router.clone();
        let meter = limits.meter.clone();
        let answers = answers.clone();
        let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let busy = activity.begin();
            let request = Metered::begin(&meter, What::Request);
            let probe = PROBE_PATHS.contains(&req.uri().path());
            let refuse = probe_only && !probe;
            // Probes are answered whatever the answers in flight hold: the node is alive.
            let crowded = !probe && answers.crowded();
            let droppable = !probe && answer::droppable(req.method(), req.uri().path());
            let mut router = router.clone();
            let answers = answers.clone();
            async move {
                let answer = if refuse {
                    Ok(slots_full().into_response())
                } else if crowded {
                    Ok(answer::crowded().into_response())
                } else {
                    router.call(req).await
                };
                drop(request);
                drop(busy);
                answer.map(|mut a| {
                    // The room reserved for building it is given back only once the answer
                    // itself is counted, so the two never both miss it.
                    let reserved = Reserved::take_off(&mut a);
                    let held = answers.hold(a, droppable);
                    drop(reserved);
                    held
                })
            }
        });
        let builder = if probe_only {
            probe_http.clone()
        } else {
            http.clone()
        };
        let watcher = graceful.watcher();
        let tls = limits.tls.clone();
        tokio::spawn(async move {
            // The handshake holds the slot, so it gets the header's deadline: a client that
            // opens connections and never finishes one cannot keep the slots.
            let stream = match tls {
                None => Stream::Plain(stream),
                Some(tls) => {
                    match tokio::time::timeout(timeouts.header, tls.accept(stream)).await {
                        Ok(Ok(s)) => Stream::Tls(Box::new(s)),
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!("TLS handshake too slow: connection closed");
                            return;
                        }
                    }
                }
            };
            let io = TokioIo::new(TimedIo::new(stream, io_activity, timeouts));
            let conn = watcher.watch(builder.serve_connection(io, svc));
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(metered);
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

fn slots_full() -> ApiError {
    metrics::counter!("queen_http_connections_refused_total").increment(1);
    ApiError(QueenError::unavailable(
        "every connection slot is taken (http_max_connections, or the memory budget's \
         connection share): this connection was accepted into the slots kept for health \
         probes and serves only /health, /ready and /metrics; retry later",
    ))
}
