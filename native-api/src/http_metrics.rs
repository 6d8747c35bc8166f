//! Request count and latency per route. The route label is the template the router matched
//! (`/api/v1/pop/queue/{q}`), never the path a client sent, so the label set is bounded by the
//! route table whatever clients ask for.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use metrics::{Label, SharedString};

/// Route label of requests no route matched (they get the 404 fallback).
pub const UNMATCHED: &str = "unmatched";

/// Outermost layer, so rejections by auth and body limits are counted too. The time is until
/// the response head is ready: every body this API sends is already in memory by then. A
/// request whose client goes away first (an abandoned long poll) is dropped mid-await and not
/// counted.
pub async fn record(req: Request, next: Next) -> Response {
    let route = route_label(req.extensions().get::<MatchedPath>());
    let method = method_label(req.method());
    let started = Instant::now();
    let resp = next.run(req).await;
    let labels = vec![
        Label::new("route", route),
        Label::new("method", method),
        Label::new("status", status_label(resp.status())),
    ];
    metrics::histogram!("queen_http_request_seconds", labels.clone())
        .record(started.elapsed().as_secs_f64());
    metrics::counter!("queen_http_requests_total", labels).increment(1);
    resp
}

pub fn route_label(matched: Option<&MatchedPath>) -> SharedString {
    match matched {
        Some(m) => SharedString::from(m.as_str().to_owned()),
        None => SharedString::const_str(UNMATCHED),
    }
}

/// Methods the API routes, by name; anything else is "other" so a client inventing methods
/// cannot add series.
pub fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// The numeric code: 204 (an empty pop) and 429/503 (back-pressure) say more than a class.
/// A status is three digits, so the label set stays bounded; the codes this API answers with
/// are spelled out to spare an allocation per request.
pub fn status_label(s: StatusCode) -> SharedString {
    let code = match s.as_u16() {
        200 => "200",
        201 => "201",
        204 => "204",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        408 => "408",
        413 => "413",
        415 => "415",
        422 => "422",
        429 => "429",
        500 => "500",
        501 => "501",
        503 => "503",
        other => return SharedString::from(other.to_string()),
    };
    SharedString::const_str(code)
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use metrics_exporter_prometheus::PrometheusBuilder;
    use tower::ServiceExt;

    use super::*;

    #[test]
    fn methods_outside_the_table_share_one_label() {
        assert_eq!(method_label(&Method::POST), "POST");
        let invented = Method::from_bytes(b"BREW").unwrap();
        assert_eq!(method_label(&invented), "other");
    }

    #[test]
    fn status_is_the_numeric_code() {
        assert_eq!(&*status_label(StatusCode::NO_CONTENT), "204");
        assert_eq!(&*status_label(StatusCode::IM_A_TEAPOT), "418");
    }

    async fn send(app: &Router, method: &str, uri: &str) -> StatusCode {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        app.clone().oneshot(req).await.unwrap().status()
    }

    /// Through a real router: the template is the label, raw paths never are, and a path no
    /// route matches is "unmatched".
    #[test]
    fn labels_are_route_templates() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let app = Router::new()
            .route("/q/{name}", get(|| async { StatusCode::NO_CONTENT }))
            .layer(axum::middleware::from_fn(record));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        metrics::with_local_recorder(&recorder, || {
            rt.block_on(async {
                assert_eq!(send(&app, "GET", "/q/alpha").await, StatusCode::NO_CONTENT);
                assert_eq!(send(&app, "GET", "/q/beta").await, StatusCode::NO_CONTENT);
                assert_eq!(send(&app, "GET", "/nowhere").await, StatusCode::NOT_FOUND);
                assert_eq!(
                    send(&app, "POST", "/q/alpha").await,
                    StatusCode::METHOD_NOT_ALLOWED
                );
            })
        });
        let text = handle.render();
        for want in [
            r#"queen_http_requests_total{route="/q/{name}",method="GET",status="204"} 2"#,
            r#"queen_http_requests_total{route="unmatched",method="GET",status="404"} 1"#,
            r#"queen_http_requests_total{route="/q/{name}",method="POST",status="405"} 1"#,
            r#"queen_http_request_seconds_count{route="/q/{name}",method="GET",status="204"} 2"#,
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
        assert!(
            !text.contains("alpha"),
            "a raw path leaked into a label:\n{text}"
        );
    }
}
