//! The server-wide limit on StickyRouting calls in progress, shared by
//! class so that GetPin is shed last, and the count of calls answered
//! before any handler runs: shed, undecodable, over-size.
//!
//! Why a layer of our own: tonic's `concurrency_limit_per_connection` and
//! `load_shed` limit each connection alone, and their refusals never reach
//! code that could count them. HTTP/2's `max_concurrent_streams` queues
//! the excess in the client rather than refusing it, so at several times
//! capacity every call waited for its deadline and goodput collapsed. This
//! gate wraps only the StickyRouting service: health and reflection calls
//! are never counted and never refused. A call may start only while the
//! calls in flight, of all classes together, are below its class's
//! ceiling (`domain::priority`); otherwise it is answered
//! `RESOURCE_EXHAUSTED` before its body is read, so it costs no decoding
//! and never touches Redis, with a `grpc-retry-pushback-ms` that tells the
//! caller how long to wait before it retries.
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::{Code, Status};
use tower::Service;

use super::codec::UNDECODABLE;
use crate::domain::priority::{Ceilings, Class, PRIORITY_HEADER, Shares};
use crate::telemetry::{Metrics, Refusal};

/// The header as a name, made at compile time: a lookup by `&str` would
/// parse the name on every call.
const PRIORITY: http::HeaderName = http::HeaderName::from_static(PRIORITY_HEADER);

/// `grpc-retry-pushback-ms` by class: how long the service suggests a
/// refused caller waits before it retries. GetPin is on a payment's
/// authorization, which cannot wait long, and the pod is full only for
/// the moment a burst lasts; feedback can wait longer, and admin calls and
/// backfills longest, so that they come back after the burst.
const PUSHBACK_MS: [u32; 4] = [20, 250, 1000, 2000];

/// Wraps the StickyRouting service with the in-flight limit.
#[derive(Clone)]
pub struct ApiGate<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// What every clone of the gate, and every admitted call, shares: one
/// allocation, so a call pays for one reference count.
struct Shared {
    in_flight: AtomicUsize,
    ceilings: Ceilings,
    /// Each class's refusal headers, made once: a refusal must cost far
    /// less than a call, and building a `Status` answer each time
    /// percent-encodes its message (bench/README.md counts the
    /// difference).
    shed_headers: [http::HeaderMap; 4],
    metrics: Arc<Metrics>,
}

impl<S> ApiGate<S> {
    /// At most `limit` calls of `inner` run at once, across all connections,
    /// and fewer of the classes that `shares` holds below the whole limit.
    pub fn new(inner: S, limit: usize, shares: Shares, metrics: Arc<Metrics>) -> Self {
        let ceilings = Ceilings::new(limit, shares);
        let shed_headers = Class::ALL.map(|class| shed_response(class, ceilings));
        Self {
            inner,
            shared: Arc::new(Shared {
                in_flight: AtomicUsize::new(0),
                ceilings,
                shed_headers,
                metrics,
            }),
        }
    }
}

impl Shared {
    /// A slot for a call of `class`, if the calls in flight are below its
    /// ceiling. One compare-and-swap, like a semaphore's, but each class
    /// compares with its own ceiling.
    fn enter(self: &Arc<Self>, class: Class) -> Option<Slot> {
        let ceiling = self.ceilings.of(class);
        let mut now = self.in_flight.load(Ordering::Relaxed);
        loop {
            if now >= ceiling {
                return None;
            }
            match self.in_flight.compare_exchange_weak(
                now,
                now + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(Slot(Some(Arc::clone(self)))),
                Err(actual) => now = actual,
            }
        }
    }
}

/// An admitted call's place in the count: given back when the handler is
/// done, or when the call is dropped (the client went away) before that.
struct Slot(Option<Arc<Shared>>);

impl Slot {
    fn release(&mut self) -> Option<Arc<Shared>> {
        let shared = self.0.take()?;
        shared.in_flight.fetch_sub(1, Ordering::Release);
        Some(shared)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.release();
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
        let class = class_of(&request);
        match self.shared.enter(class) {
            Some(slot) => GateFuture::Admitted {
                inner: self.inner.call(request),
                slot,
                class,
            },
            None => {
                self.shared.metrics.refused(Refusal::Shed, class);
                let mut response = http::Response::new(Body::empty());
                *response.headers_mut() = self.shared.shed_headers[class as usize].clone();
                GateFuture::Shed {
                    response: Some(response),
                }
            }
        }
    }
}

/// The call's class: its method is the path's last segment.
fn class_of<B>(request: &http::Request<B>) -> Class {
    let method = request.uri().path().rsplit('/').next().unwrap_or("");
    let priority = request.headers().get(PRIORITY).map(|v| v.as_bytes());
    Class::of(method, priority)
}

/// The answer to a call of `class` at its ceiling: trailers-only, as tonic
/// answers every error. Short, because HPACK encodes it into every refusal.
fn shed_response(class: Class, ceilings: Ceilings) -> http::HeaderMap {
    let (limit, ceiling) = (ceilings.of(Class::Pin), ceilings.of(class));
    let message = match class {
        Class::Pin => format!("over this server's limit of {limit} calls in progress; retry"),
        _ => format!(
            "{} calls start only below {ceiling} of this server's {limit} calls in progress; retry",
            class.name()
        ),
    };
    let mut headers = Status::resource_exhausted(message)
        .into_http::<Body>()
        .into_parts()
        .0
        .headers;
    headers.insert(
        "grpc-retry-pushback-ms",
        http::HeaderValue::from(PUSHBACK_MS[class as usize]),
    );
    headers
}

pin_project_lite::pin_project! {
    /// The admitted call's future holding its slot, or the shed answer.
    #[project = GateProjection]
    pub enum GateFuture<F> {
        Admitted {
            #[pin]
            inner: F,
            slot: Slot,
            class: Class,
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
            GateProjection::Admitted { inner, slot, class } => {
                let Ok(response) = std::task::ready!(inner.poll(cx));
                // The handler's work is done; the body only carries its answer.
                let shared = slot.release();
                let response = relabel_broken_frame(response);
                if let (Some(refusal), Some(shared)) =
                    (refused_before_the_handler(&response), shared)
                {
                    shared.metrics.refused(refusal, *class);
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
mod tests;
