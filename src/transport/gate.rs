//! The server-wide limit on StickyRouting calls in progress, and the count
//! of calls answered before any handler runs: shed, undecodable, over-size.
//!
//! Why a layer of our own: tonic's `concurrency_limit_per_connection` and
//! `load_shed` limit each connection alone, and their refusals never reach
//! code that could count them. HTTP/2's `max_concurrent_streams` queues
//! the excess in the client rather than refusing it, so at several times
//! capacity every call waited for its deadline and goodput collapsed. This
//! gate wraps only the StickyRouting service: health and reflection calls
//! are never counted and never refused. A call over the limit is answered
//! `RESOURCE_EXHAUSTED` before its body is read, so it costs no decoding
//! and never touches Redis; the caller retries on another pod.
//!
//! The gate also re-labels tonic's answer to a body that is not one
//! well-formed gRPC frame (empty, cut short, flagged compressed without a
//! `grpc-encoding`): tonic answers `INTERNAL`, as gRPC's guide says of a
//! server's own parse failures, but here it is the caller's bad input, like
//! a message that does not decode, and `INTERNAL` is kept for real faults.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::{Code, Status};
use tower::Service;

use super::codec::UNDECODABLE;
use crate::telemetry::{Metrics, Refusal};

/// Wraps the StickyRouting service with the in-flight limit.
#[derive(Clone)]
pub struct ApiGate<S> {
    inner: S,
    slots: Arc<Semaphore>,
    /// The refusal's headers, made once: a refusal must cost far less than
    /// a call, and building a `Status` answer each time (percent-encoding
    /// its message) cost a seventh of a refusal's instructions.
    shed_headers: http::HeaderMap,
    metrics: Arc<Metrics>,
}

impl<S> ApiGate<S> {
    /// At most `limit` calls of `inner` run at once, across all connections.
    pub fn new(inner: S, limit: usize, metrics: Arc<Metrics>) -> Self {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            inner,
            slots: Arc::new(Semaphore::new(limit)),
            shed_headers: shed_response(limit).into_parts().0.headers,
            metrics,
        }
    }
}

impl<S: NamedService> NamedService for ApiGate<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for ApiGate<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>, Error = Infallible>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = GateFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The generated server is always ready; asking keeps the contract.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(permit) => GateFuture::Admitted {
                inner: self.inner.call(request),
                permit: Some(permit),
                metrics: Arc::clone(&self.metrics),
            },
            Err(_) => {
                self.metrics.refused(Refusal::Shed);
                let mut response = http::Response::new(Body::empty());
                *response.headers_mut() = self.shed_headers.clone();
                GateFuture::Shed {
                    response: Some(response),
                }
            }
        }
    }
}

/// The answer to a call over the limit: trailers-only, as tonic answers
/// every error. Short, because HPACK encodes it into every refusal.
fn shed_response(limit: usize) -> http::Response<Body> {
    Status::resource_exhausted(format!(
        "over this server's limit of {limit} calls in progress; retry"
    ))
    .into_http()
}

pin_project_lite::pin_project! {
    /// The admitted call's future holding its slot, or the shed answer.
    #[project = GateProjection]
    pub enum GateFuture<F> {
        Admitted {
            #[pin]
            inner: F,
            permit: Option<OwnedSemaphorePermit>,
            metrics: Arc<Metrics>,
        },
        Shed {
            response: Option<http::Response<Body>>,
        },
    }
}

impl<F> Future for GateFuture<F>
where
    F: Future<Output = Result<http::Response<Body>, Infallible>>,
{
    type Output = Result<http::Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            GateProjection::Admitted {
                inner,
                permit,
                metrics,
            } => {
                let Ok(response) = std::task::ready!(inner.poll(cx));
                // The handler's work is done; the body only carries its answer.
                permit.take();
                let response = relabel_broken_frame(response);
                if let Some(refusal) = refused_before_the_handler(&response) {
                    metrics.refused(refusal);
                }
                Poll::Ready(Ok(response))
            }
            GateProjection::Shed { response } => {
                // Polled again after it answered: an empty answer, not a panic.
                Poll::Ready(Ok(response.take().unwrap_or_default()))
            }
        }
    }
}

/// Which refusal `response` is, if tonic answered it before the handler ran:
/// tonic's size check is the only source of `OUT_OF_RANGE`, and our codec
/// the only source of an `INVALID_ARGUMENT` that starts with [`UNDECODABLE`].
/// Errors leave as trailers-only responses, with the status in the headers,
/// so only failed calls pay for a header lookup past `grpc-status`.
fn refused_before_the_handler(response: &http::Response<Body>) -> Option<Refusal> {
    let headers = response.headers();
    let code = headers.get("grpc-status")?;
    match Code::from_bytes(code.as_bytes()) {
        Code::OutOfRange => Some(Refusal::OverSize),
        Code::InvalidArgument
            if headers
                .get("grpc-message")
                .is_some_and(|m| percent_decoded(m.as_bytes()).starts_with(UNDECODABLE)) =>
        {
            Some(Refusal::Undecodable)
        }
        _ => None,
    }
}

/// How tonic 0.14's answers to a body that is not one well-formed frame
/// begin (`codec/decode.rs`, `server/grpc.rs`). A handler never says these
/// words; the fuzz (`src/transport/fuzz.rs`) fails if tonic changes them.
const TONIC_FRAME_ERRORS: &[&str] = &[
    "Missing request message",
    "Unexpected EOF decoding stream",
    "protocol error: received message with",
];

/// tonic's `INTERNAL` answer to a broken frame, as `INVALID_ARGUMENT`
/// starting with [`UNDECODABLE`]; any other answer as it is. Only an
/// `INTERNAL` answer pays for more than the one header lookup.
fn relabel_broken_frame(response: http::Response<Body>) -> http::Response<Body> {
    let headers = response.headers();
    let internal = headers
        .get("grpc-status")
        .is_some_and(|code| Code::from_bytes(code.as_bytes()) == Code::Internal);
    if !internal {
        return response;
    }
    match Status::from_header_map(headers) {
        Some(status)
            if TONIC_FRAME_ERRORS
                .iter()
                .any(|words| status.message().starts_with(words)) =>
        {
            Status::invalid_argument(format!(
                "{UNDECODABLE} (the body is not one well-formed gRPC frame: {})",
                status.message()
            ))
            .into_http()
        }
        _ => response,
    }
}

/// `grpc-message` as sent: tonic percent-encodes spaces and a few other
/// characters, none of which [`UNDECODABLE`] holds but the space.
fn percent_decoded(message: &[u8]) -> String {
    String::from_utf8_lossy(message).replace("%20", " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: Status) -> http::Response<Body> {
        status.into_http()
    }

    #[test]
    fn refusals_before_the_handler_are_told_apart_from_handler_errors() {
        let undecodable = Status::invalid_argument(format!("{UNDECODABLE} (invalid wire type)"));
        assert_eq!(
            refused_before_the_handler(&answer(undecodable)),
            Some(Refusal::Undecodable)
        );
        let too_big = Status::out_of_range("decoded message length too large");
        assert_eq!(
            refused_before_the_handler(&answer(too_big)),
            Some(Refusal::OverSize)
        );
        let bad_field = Status::invalid_argument("merchant_id: must not be empty");
        assert_eq!(refused_before_the_handler(&answer(bad_field)), None);
        let ok = http::Response::new(Body::empty());
        assert_eq!(refused_before_the_handler(&ok), None);
    }

    #[test]
    fn broken_frames_are_the_callers_fault_and_other_internals_stay() {
        for words in [
            "Missing request message.",
            "Unexpected EOF decoding stream.",
            "protocol error: received message with compressed-flag but no grpc-encoding was specified",
            "protocol error: received message with invalid compression flag: 2 (valid flags are 0 and 1), while sending request",
        ] {
            let answer = relabel_broken_frame(answer(Status::internal(words)));
            let status = Status::from_header_map(answer.headers()).unwrap();
            assert_eq!(status.code(), Code::InvalidArgument, "{words}");
            assert!(status.message().starts_with(UNDECODABLE), "{status:?}");
            assert!(status.message().contains(words), "{status:?}");
            assert_eq!(
                refused_before_the_handler(&answer),
                Some(Refusal::Undecodable)
            );
        }
        let foreign = Status::internal("a value stored under the customer's hash is not one");
        let answer = relabel_broken_frame(answer(foreign));
        let status = Status::from_header_map(answer.headers()).unwrap();
        assert_eq!(status.code(), Code::Internal);
        let ok = relabel_broken_frame(http::Response::new(Body::empty()));
        assert!(ok.headers().is_empty());
    }

    #[test]
    fn the_shed_answer_is_resource_exhausted() {
        let mut gate = ApiGate::new(
            tower::service_fn(|_: http::Request<Body>| async {
                Ok::<_, Infallible>(http::Response::new(Body::empty()))
            }),
            7,
            Arc::new(Metrics::new().unwrap()),
        );
        // Hold every slot, so that the next call is refused.
        let _held = Arc::clone(&gate.slots).try_acquire_many_owned(7).unwrap();
        let call = gate.call(http::Request::new(Body::empty()));
        let response = futures_ready(call);
        let code = response.headers().get("grpc-status").unwrap();
        assert_eq!(Code::from_bytes(code.as_bytes()), Code::ResourceExhausted);
        let message = response.headers().get("grpc-message").unwrap();
        assert!(percent_decoded(message.as_bytes()).contains("7 calls in progress"));
        assert_eq!(
            response.headers().get("content-type").unwrap(),
            "application/grpc"
        );
    }

    /// The output of a future that is ready at its first poll.
    fn futures_ready<F: Future<Output = Result<http::Response<Body>, Infallible>>>(
        future: F,
    ) -> http::Response<Body> {
        let mut future = std::pin::pin!(future);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(response)) => response,
            Poll::Pending => panic!("a refusal is answered at once"),
        }
    }
}
