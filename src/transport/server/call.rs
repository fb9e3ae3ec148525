//! One request on one of our connections: the connection's TLS identity put
//! where the handlers read it, and a bound on how long the answer may take,
//! as tonic's own server gave both.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::service::Routes;
use tonic::{Code, Status};
use tower::ServiceExt;
use tower::util::Oneshot;

use crate::pki::ClientIdentity;
use crate::transport::deadline::parse_grpc_timeout;

/// The longest any call may take on the server, whatever its deadline says
/// and however slowly its request body arrives: a client that opens streams
/// and never finishes sending them cannot hold memory or concurrency slots
/// for longer. The handlers' own bound (four Redis timeouts, 1 s by default)
/// answers every call that did arrive well before it.
pub const CALL_BOUND: Duration = Duration::from_secs(10);

/// The routes, as served on one connection.
#[derive(Clone)]
pub(super) struct CallService {
    routes: Routes,
    /// The names the client's certificate proved; `None` on plaintext.
    identity: Option<ClientIdentity>,
}

impl CallService {
    pub(super) fn new(routes: Routes, identity: Option<ClientIdentity>) -> Self {
        Self { routes, identity }
    }
}

impl hyper::service::Service<http::Request<Incoming>> for CallService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = CallFuture;

    fn call(&self, mut request: http::Request<Incoming>) -> CallFuture {
        // What tonic's server inserts for a connection whose
        // `Connected::ConnectInfo` is ours; the admin check reads it.
        request.extensions_mut().insert(self.identity.clone());
        let callers = request
            .headers()
            .get("grpc-timeout")
            .and_then(|value| value.to_str().ok())
            .and_then(parse_grpc_timeout);
        let (bound, expired) = match callers {
            Some(deadline) if deadline < CALL_BOUND => (deadline, Expired::CallersDeadline),
            _ => (CALL_BOUND, Expired::ServersBound),
        };
        let answer = self.routes.clone().oneshot(request.map(Body::new));
        CallFuture {
            answer: tokio::time::timeout(bound, answer),
            expired,
        }
    }
}

/// Which bound a call that took too long ran into.
#[derive(Debug, Clone, Copy)]
enum Expired {
    CallersDeadline,
    ServersBound,
}

impl Expired {
    /// The answer when the bound passes first. The handlers answer a margin
    /// before the caller's deadline, so this is rare for them; it answers
    /// a request whose body never arrived, and health or reflection calls.
    fn answer(self) -> http::Response<Body> {
        let message = match self {
            Self::CallersDeadline => "the caller's deadline passed before the answer".to_owned(),
            Self::ServersBound => {
                format!("no answer within the server's {CALL_BOUND:?} bound on a call")
            }
        };
        Status::new(Code::DeadlineExceeded, message).into_http()
    }
}

pin_project_lite::pin_project! {
    /// The routed call, or the bound's answer if it passes first.
    pub(super) struct CallFuture {
        #[pin]
        answer: tokio::time::Timeout<Oneshot<Routes, http::Request<Body>>>,
        expired: Expired,
    }
}

impl Future for CallFuture {
    type Output = Result<http::Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        Poll::Ready(match std::task::ready!(this.answer.poll(cx)) {
            Ok(answer) => answer,
            Err(_elapsed) => Ok(this.expired.answer()),
        })
    }
}
