//! The relay against a real leader on loopback (an axum app standing for it).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

use crate::meter::ConnectionMeter;
use crate::test_pool::Pool;

use super::{ForwardOptions, Forwarder, Leader, LeaderLookup};

#[derive(Debug)]
struct Unused;

impl LeaderLookup for Unused {
    fn leader_of(&self, _tenant: &str) -> Leader {
        Leader::Here
    }
}

fn forwarder(max_body: usize) -> Forwarder {
    metered(max_body, None)
}

fn metered(max_body: usize, meter: Option<Arc<dyn ConnectionMeter>>) -> Forwarder {
    let opts = ForwardOptions {
        node_id: 2,
        leaders: Arc::new(Unused),
        max_inflight: 4,
        connect_timeout: Duration::from_secs(5),
        answer_margin: Duration::from_secs(10),
    };
    Forwarder::new(
        &opts,
        max_body,
        Duration::from_secs(5),
        Duration::from_secs(60),
        meter,
    )
}

/// Serves `app` on a loopback port; its base URL.
async fn leader(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn push(body: &'static str) -> Request {
    Request::builder()
        .method("POST")
        .uri("/api/v1/push?echo=1")
        .header("content-type", "application/json")
        .header("cookie", "session=1")
        .body(Body::from(body))
        .unwrap()
}

async fn text(resp: axum::response::Response) -> (StatusCode, HeaderMap, String) {
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

#[tokio::test]
async fn the_leaders_answer_is_relayed_with_its_status_and_type() {
    let app = axum::Router::new().route(
        "/api/v1/push",
        post(|headers: HeaderMap, body: String| async move {
            let seen = format!(
                "{}|{}|{}",
                headers["x-queen-forwarded"].to_str().unwrap_or(""),
                headers.contains_key("cookie"),
                body
            );
            (StatusCode::CREATED, [("content-type", "text/x-test")], seen)
        }),
    );
    let url = leader(app).await;
    let (status, headers, body) = text(forwarder(1 << 20).relay(push("{}"), 1, url).await).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(headers["content-type"], "text/x-test");
    assert_eq!(body, "2|false|{}");
}

#[tokio::test]
async fn a_leader_that_cannot_be_reached_is_named_as_before() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let (status, _, body) = text(forwarder(1 << 20).relay(push("{}"), 3, url.clone()).await).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["code"], "not_leader", "{v}");
    assert_eq!(
        (v["leader"].as_u64(), v["leaderUrl"].as_str()),
        (Some(3), Some(url.as_str()))
    );
}

/// Review s19 forward H1: the leader has done the request (an autoAck pop consumed what it
/// answers), so an answer over this node's `max_body_bytes` is relayed whole, with its length.
#[tokio::test]
async fn an_answer_over_the_limit_is_relayed_whole_and_a_body_over_it_is_not_sent() {
    let answer = "x".repeat(100);
    let sent = answer.clone();
    let app = axum::Router::new().route("/api/v1/push", post(move || async move { sent }));
    let url = leader(app).await;
    let resp = forwarder(64).relay(push("{}"), 1, url.clone()).await;
    assert_eq!(resp.body().size_hint().exact(), Some(100));
    let (status, _, body) = text(resp).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, answer);
    let big = Box::leak("y".repeat(100).into_boxed_str());
    let (status, _, _) = text(forwarder(64).relay(push(big), 1, url).await).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

fn push_bytes(len: usize) -> Request {
    Request::builder()
        .method("POST")
        .uri("/api/v1/push")
        .header("content-type", "application/json")
        .body(Body::from(vec![b'z'; len]))
        .unwrap()
}

/// Review s19 forward H2: a relayed body is charged to the connections' pool while the relay
/// lives; one that would leave the pool over its share is refused 503, retriably.
#[tokio::test]
async fn a_relayed_body_is_charged_while_it_lives_and_refused_past_the_share() {
    // A leader that accepts and never reads nor answers.
    let stalled = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", stalled.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = stalled.accept().await {
            held.push(sock);
        }
    });
    let pool = Arc::new(Pool {
        share: 1 << 20,
        ..Pool::default()
    });
    let meter: Arc<dyn ConnectionMeter> = pool.clone();
    let fwd = Arc::new(metered(4 << 20, Some(meter)));
    let first = {
        let (fwd, url) = (fwd.clone(), url.clone());
        tokio::spawn(async move { fwd.relay(push_bytes(600 << 10), 1, url).await })
    };
    let charged = async {
        while pool.bytes.load(std::sync::atomic::Ordering::Relaxed) < 600 << 10 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    // A bound on a hang, not a speed assertion: without the charge the count never comes.
    tokio::time::timeout(Duration::from_secs(30), charged)
        .await
        .expect("the first relay's body is never charged");
    let (status, _, body) = text(fwd.relay(push_bytes(600 << 10), 1, url).await).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["code"], "unavailable", "{v}");
    assert_eq!(
        pool.bytes.load(std::sync::atomic::Ordering::Relaxed),
        600 << 10
    );
    first.abort();
    let _ = first.await;
    assert_eq!(pool.bytes.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// Review s19 forward M2: relayed long polls take at most half of the slots: with every one
/// of theirs parked at a leader that does not answer, a push through the same follower is
/// relayed; and all of them together never pass `forward_max_inflight` (review s20 lead C1).
#[tokio::test]
async fn parked_long_polls_leave_the_pushes_their_slots() {
    let app = axum::Router::new()
        .route(
            "/api/v1/pop",
            axum::routing::get(|| async {
                std::future::pending::<()>().await;
                "never"
            }),
        )
        .route(
            "/api/v1/push",
            post(|| async { (StatusCode::CREATED, "ok") }),
        );
    let url = leader(app).await;
    let fwd = Arc::new(forwarder(1 << 20));
    let mut polls = Vec::new();
    for _ in 0..2 {
        let (fwd, url) = (fwd.clone(), url.clone());
        polls.push(tokio::spawn(async move {
            let pop = Request::builder()
                .uri("/api/v1/pop?wait=true&timeout=30000")
                .body(Body::empty())
                .unwrap();
            fwd.relay(pop, 1, url).await
        }));
    }
    // A bound on a hang, not a speed assertion: two polls take every poll slot (half of 4).
    let parked = async {
        while fwd.polls.available_permits() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), parked)
        .await
        .expect("the polls never took their slots");
    let pop = Request::builder()
        .uri("/api/v1/pop?wait=true&timeout=30000")
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = text(fwd.relay(pop, 1, url.clone()).await).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a third poll: {body}"
    );
    assert!(body.contains("long polls"), "{body}");
    let (status, _, body) = text(fwd.relay(push("{}"), 1, url).await).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        fwd.inflight.available_permits(),
        2,
        "the polls hold two of all four"
    );
    for p in polls {
        p.abort();
    }
}

/// Review s21 lead B1: an upload that declares a large body and sends nothing holds
/// nothing: another relay beside it is served, not refused for memory; a body declared past
/// `max_body_bytes` is 413 (final), not 503, whatever the share holds; B2: a refusal with the
/// body unread closes the connection.
#[tokio::test]
async fn an_idle_upload_holds_nothing_and_a_declared_overlong_body_is_413() {
    let app = axum::Router::new().route("/api/v1/push", post(|| async { StatusCode::CREATED }));
    let url = leader(app).await;
    let pool = Arc::new(Pool {
        share: 1 << 20,
        ..Pool::default()
    });
    let meter: Arc<dyn ConnectionMeter> = pool.clone();
    let fwd = Arc::new(metered(4 << 20, Some(meter.clone())));
    let idle = {
        let (fwd, url) = (fwd.clone(), url.clone());
        let req = Request::builder()
            .method("POST")
            .uri("/api/v1/push")
            .header("content-length", (900 << 10).to_string())
            .body(Body::new(NeverSends))
            .unwrap();
        tokio::spawn(async move { fwd.relay(req, 1, url).await })
    };
    tokio::task::yield_now().await;
    let (status, _, body) = text(fwd.relay(push_bytes(10 << 10), 1, url.clone()).await).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    idle.abort();
    let _ = idle.await;
    meter.answer(700 << 10, true);
    let overlong = Request::builder()
        .method("POST")
        .uri("/api/v1/push")
        .header("content-length", (5 << 20).to_string())
        .body(Body::new(NeverSends))
        .unwrap();
    let (status, headers, body) = text(fwd.relay(overlong, 1, url).await).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(headers["connection"], "close");
    meter.answer(700 << 10, false);
    assert_eq!(pool.bytes.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// Review s21 lead B1: a chunked body (no declared length) is charged as it arrives and
/// refused once past the share, not read whole; the connection is closed.
#[tokio::test]
async fn a_chunked_body_past_the_share_is_refused_as_it_arrives() {
    let pool = Arc::new(Pool {
        share: 1 << 20,
        ..Pool::default()
    });
    let meter: Arc<dyn ConnectionMeter> = pool.clone();
    let fwd = metered(4 << 20, Some(meter));
    // 64 KiB chunks, 2 MiB in all, then never ending.
    let chunks = Body::new(Chunks { left: 32 });
    let req = Request::builder()
        .method("POST")
        .uri("/api/v1/push")
        .body(chunks)
        .unwrap();
    let (status, headers, body) = text(fwd.relay(req, 1, "http://127.0.0.1:9".into()).await).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("memory budget"), "{body}");
    assert_eq!(headers["connection"], "close");
    assert_eq!(pool.bytes.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// `left` chunks of 64 KiB, then a body that never ends.
struct Chunks {
    left: usize,
}

impl HttpBody for Chunks {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, std::io::Error>>> {
        if self.left == 0 {
            return std::task::Poll::Pending;
        }
        self.left -= 1;
        let chunk = bytes::Bytes::from(vec![b' '; 64 << 10]);
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(chunk))))
    }
}

/// A request body whose bytes never come.
struct NeverSends;

impl HttpBody for NeverSends {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, std::io::Error>>> {
        std::task::Poll::Pending
    }
}

#[test]
fn pooled_connections_go_before_the_leaders_idle_timeout_closes_them() {
    use super::relay::pool_idle;
    // The default 60 s idle timeout: 30 s, as before.
    assert_eq!(pool_idle(Duration::from_secs(60)), Duration::from_secs(30));
    // A short one: half of it, so the leader never closes a connection a relay just took.
    assert_eq!(
        pool_idle(Duration::from_millis(200)),
        Duration::from_millis(100)
    );
    assert!(pool_idle(Duration::from_secs(600)) <= Duration::from_secs(30));
}

/// Who leads, as a list of answers: each lookup takes the next, the last one repeats.
#[derive(Debug)]
struct Changing(std::sync::Mutex<Vec<Leader>>);

impl LeaderLookup for Changing {
    fn leader_of(&self, _tenant: &str) -> Leader {
        let mut answers = self.0.lock().unwrap();
        if answers.len() > 1 {
            answers.remove(0)
        } else {
            answers[0].clone()
        }
    }
}

/// The door's relay layer over a local push handler answering "local", with `leaders`.
fn door(leaders: Vec<Leader>) -> axum::Router {
    let opts = ForwardOptions {
        node_id: 2,
        leaders: Arc::new(Changing(std::sync::Mutex::new(leaders))),
        max_inflight: 4,
        connect_timeout: Duration::from_secs(5),
        answer_margin: Duration::from_secs(10),
    };
    let fwd = Arc::new(Forwarder::new(
        &opts,
        1 << 20,
        Duration::from_secs(5),
        Duration::from_secs(60),
        None,
    ));
    axum::Router::new()
        .route(
            "/api/v1/push",
            post(|body: String| async move { format!("local|{body}") }),
        )
        .layer(axum::middleware::from_fn_with_state(
            &queenmq_protocol::rows::PUSH,
            super::layer,
        ))
        .layer(axum::Extension(fwd))
}

/// Review s19 forward L3: the leader was chosen before the body was read; an upload that
/// spans an election now goes to the leader of when it was read, or is answered here.
#[tokio::test]
async fn the_leader_is_asked_again_once_the_body_is_read() {
    use tower::ServiceExt;
    let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let old = format!("http://{}", gone.local_addr().unwrap());
    drop(gone);
    let new_leader = leader(axum::Router::new().route(
        "/api/v1/push",
        post(|b: String| async move { format!("node3|{b}") }),
    ))
    .await;

    // Node 1 led when the request came, node 3 once its body was in: node 3 answers.
    let app = door(vec![
        Leader::Other {
            id: 1,
            url: Some(old.clone()),
        },
        Leader::Other {
            id: 3,
            url: Some(new_leader),
        },
    ]);
    let (status, _, body) = text(app.oneshot(push("{}")).await.unwrap()).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "node3|{}"));

    // This node leads once the body is in: its own handler answers, with the body.
    let app = door(vec![
        Leader::Other {
            id: 1,
            url: Some(old.clone()),
        },
        Leader::Here,
    ]);
    let (status, _, body) = text(app.oneshot(push("{\"a\":1}")).await.unwrap()).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "local|{\"a\":1}"));

    // No leader once the body is in: 503 not_leader naming none, nothing sent (a relay to
    // the old leader would have named node 1: review s22 lead L5).
    let app = door(vec![
        Leader::Other {
            id: 1,
            url: Some(old),
        },
        Leader::Unknown,
    ]);
    let (status, _, body) = text(app.oneshot(push("{}")).await.unwrap()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["code"], "not_leader", "{v}");
    assert!(v["leader"].is_null(), "{v}");
}

/// Review s19 forward M3: once the request may have reached the leader, a lost connection and
/// an answer too late are both "may or may not be done" (a retry may repeat it), never
/// `not_leader` (which tells the client nothing was sent).
#[tokio::test]
async fn a_lost_connection_and_a_late_answer_may_or_may_not_be_done() {
    use tokio::io::AsyncReadExt;
    // A leader that reads the request, then drops the connection without a word.
    let hangs_up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", hangs_up.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = hangs_up.accept().await {
            let mut buf = [0u8; 4096];
            let _ = sock.read(&mut buf).await;
            drop(sock);
        }
    });
    let (status, _, body) = text(forwarder(1 << 20).relay(push("{}"), 1, url).await).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["code"], "unavailable", "{v}");
    assert!(body.contains("may or may not be done"), "{body}");

    // A leader that reads the request and never answers: the answer bound ends the wait.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = silent.accept().await {
            held.push(sock);
        }
    });
    let opts = ForwardOptions {
        node_id: 2,
        leaders: Arc::new(Unused),
        max_inflight: 4,
        connect_timeout: Duration::from_secs(5),
        answer_margin: Duration::from_millis(200),
    };
    let fwd = Forwarder::new(
        &opts,
        1 << 20,
        Duration::from_secs(5),
        Duration::from_secs(60),
        None,
    );
    let (status, _, body) = text(fwd.relay(push("{}"), 1, url).await).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["code"], "unavailable", "{v}");
    assert!(
        body.contains("did not answer within 200 ms") && body.contains("may or may not be done"),
        "{body}"
    );
}
