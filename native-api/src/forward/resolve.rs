//! The relay's name lookup, bounded by the connect timeout. The connector's own timeout covers
//! the TCP connect only, so a hung lookup ran into the relay's whole answer bound and was
//! reported "may or may not be done" though nothing had left the node (review s19 forward
//! L4). A lookup past the bound is a connect error: 503 `not_leader`, retry on any node.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::dns::Name;

/// Wraps a resolver (the connector's `GaiResolver`) with a deadline per lookup.
#[derive(Clone, Debug)]
pub(super) struct TimedResolver<R> {
    inner: R,
    limit: Duration,
}

impl<R> TimedResolver<R> {
    pub(super) fn new(inner: R, limit: Duration) -> Self {
        TimedResolver { inner, limit }
    }
}

type Lookup<A> = Pin<Box<dyn Future<Output = Result<A, io::Error>> + Send>>;

impl<R> tower::Service<Name> for TimedResolver<R>
where
    R: tower::Service<Name, Error = io::Error>,
    R::Future: Send + 'static,
    R::Response: 'static,
{
    type Response = R::Response;
    type Error = io::Error;
    type Future = Lookup<R::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let host = name.as_str().to_string();
        let lookup = self.inner.call(name);
        let limit = self.limit;
        Box::pin(async move {
            match tokio::time::timeout(limit, lookup).await {
                Ok(found) => found,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("looking up {host} took over {} ms", limit.as_millis()),
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::str::FromStr;
    use tower::Service;

    /// A resolver whose lookups never end.
    #[derive(Clone)]
    struct Hung;

    impl tower::Service<Name> for Hung {
        type Response = std::vec::IntoIter<SocketAddr>;
        type Error = io::Error;
        type Future = std::future::Pending<Result<Self::Response, io::Error>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _name: Name) -> Self::Future {
            std::future::pending()
        }
    }

    #[tokio::test]
    async fn a_hung_lookup_fails_at_the_connect_timeout() {
        let mut r = TimedResolver::new(Hung, Duration::from_millis(50));
        let name = Name::from_str("leader.example").expect("a valid name");
        let e = r.call(name).await.expect_err("a hung lookup fails");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("leader.example"), "{e}");
    }
}
