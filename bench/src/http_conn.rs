//! One HTTP/1.1 keep-alive connection, owned by one worker. Requests go one at a time; a
//! failed or timed-out request drops the connection and the next request reconnects.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::HeaderValue;
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Where the broker listens, parsed once from `--url`.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `host:port`, for connecting and for the `Host` header.
    authority: String,
    /// Path prefix from the URL, without a trailing slash (usually empty).
    base_path: String,
    /// Sent as `Authorization` on every request when set (a tenant's token).
    authorization: Option<HeaderValue>,
}

impl Endpoint {
    pub fn parse(url: &str) -> anyhow::Result<Self> {
        let uri: Uri = url.parse().with_context(|| format!("bad --url {url:?}"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => bail!("--url {url:?}: scheme {other:?} is not supported (http only)"),
            None => bail!("--url {url:?} has no scheme; use http://host:port"),
        }
        let host = uri
            .host()
            .ok_or_else(|| anyhow!("--url {url:?} has no host"))?;
        let port = uri.port_u16().unwrap_or(80);
        let base_path = uri.path().trim_end_matches('/').to_string();
        Ok(Self {
            authority: format!("{host}:{port}"),
            base_path,
            authorization: None,
        })
    }

    /// The same endpoint with an `Authorization` header on every request.
    pub fn with_authorization(mut self, value: &str) -> anyhow::Result<Self> {
        let mut header =
            HeaderValue::from_str(value).context("--authorization is not a valid header value")?;
        header.set_sensitive(true);
        self.authorization = Some(header);
        Ok(self)
    }
}

/// A request body and its `Content-Type`.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub bytes: Bytes,
    pub content_type: &'static str,
}

impl Outgoing {
    pub fn json(text: String) -> Self {
        Self {
            bytes: Bytes::from(text),
            content_type: "application/json",
        }
    }
}

/// An answer: status, `Content-Type` and the whole body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub content_type: Option<String>,
    pub body: Bytes,
}

pub struct HttpConn {
    endpoint: Endpoint,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl HttpConn {
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            sender: None,
        }
    }

    async fn open(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        let stream = TcpStream::connect(&self.endpoint.authority)
            .await
            .with_context(|| format!("connecting to {}", self.endpoint.authority))?;
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP/1.1 handshake")?;
        // The connection task ends when the sender is dropped or the peer closes; its error,
        // if any, surfaces on the next request through the sender.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    async fn sender(&mut self) -> anyhow::Result<&mut SendRequest<Full<Bytes>>> {
        if self.sender.as_ref().is_some_and(SendRequest::is_closed) {
            self.sender = None;
        }
        if self.sender.is_none() {
            self.sender = Some(self.open().await?);
        }
        self.sender
            .as_mut()
            .ok_or_else(|| anyhow!("no connection to {}", self.endpoint.authority))
    }

    /// Sends one request and reads the whole answer within `timeout`.
    pub async fn request(
        &mut self,
        method: Method,
        path_and_query: &str,
        body: Option<Outgoing>,
        timeout: Duration,
    ) -> anyhow::Result<Answer> {
        let result =
            tokio::time::timeout(timeout, self.request_inner(method, path_and_query, body))
                .await
                .unwrap_or_else(|_| Err(anyhow!("no answer within {} ms", timeout.as_millis())));
        if result.is_err() {
            // The connection's state is unknown (e.g. an answer still in flight): start afresh.
            self.sender = None;
        }
        result
    }

    async fn request_inner(
        &mut self,
        method: Method,
        path_and_query: &str,
        body: Option<Outgoing>,
    ) -> anyhow::Result<Answer> {
        let uri = format!("{}{}", self.endpoint.base_path, path_and_query);
        let mut builder = Request::builder()
            .method(method)
            .uri(uri)
            .header(hyper::header::HOST, self.endpoint.authority.as_str());
        if let Some(value) = &self.endpoint.authorization {
            builder = builder.header(hyper::header::AUTHORIZATION, value.clone());
        }
        let body = match body {
            Some(out) => {
                builder = builder.header(hyper::header::CONTENT_TYPE, out.content_type);
                Full::new(out.bytes)
            }
            None => Full::new(Bytes::new()),
        };
        let request = builder.body(body).context("building request")?;
        let sender = self.sender().await?;
        sender.ready().await.context("connection not ready")?;
        let response = sender
            .send_request(request)
            .await
            .context("sending request")?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = response
            .into_body()
            .collect()
            .await
            .context("reading answer body")?
            .to_bytes();
        Ok(Answer {
            status,
            content_type,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_parses_host_port_and_base() -> anyhow::Result<()> {
        let e = Endpoint::parse("http://127.0.0.1:6632")?;
        assert_eq!(e.authority, "127.0.0.1:6632");
        assert_eq!(e.base_path, "");
        let e = Endpoint::parse("http://broker/queen/")?;
        assert_eq!(e.authority, "broker:80");
        assert_eq!(e.base_path, "/queen");
        Ok(())
    }

    #[test]
    fn authorization_must_be_a_header_value() -> anyhow::Result<()> {
        let e = Endpoint::parse("http://127.0.0.1:6632")?.with_authorization("Bearer abc")?;
        assert_eq!(
            e.authorization.as_ref().map(HeaderValue::as_bytes),
            Some(&b"Bearer abc"[..])
        );
        assert!(Endpoint::parse("http://127.0.0.1:6632")?
            .with_authorization("Bearer a\nb")
            .is_err());
        Ok(())
    }

    #[test]
    fn endpoint_refuses_other_schemes() {
        assert!(Endpoint::parse("https://x:1").is_err());
        assert!(Endpoint::parse("127.0.0.1:6632").is_err());
    }
}
