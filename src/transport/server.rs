//! The gRPC server's connections: accepted, served over HTTP/2, retired at
//! their age with GOAWAY, and drained on shutdown. The routes (API, health,
//! reflection) are tonic's; the connections are ours.
//!
//! Why not tonic's `Server`: in tonic 0.14.9, `max_connection_age` with a
//! grace period sleeps for the age, then for the grace, and then drops the
//! connection (`connection_timeout_future` in
//! `tonic/src/transport/server/mod.rs`): it never sends GOAWAY, and every
//! connection is cut with its calls in flight. A cut RecordOutcome reads as
//! UNAVAILABLE, "nothing applied", which may be false. Here each connection
//! is served by hyper's HTTP/2 connection directly ([`retire`]): at its own
//! jittered age it gets hyper's graceful shutdown (h2's two-step GOAWAY: the
//! largest stream id and a PING, then the last stream it accepted once the
//! PING is answered), every stream already open runs to its end, and only a
//! stream still open a grace later is cut. The same happens to every open
//! connection when the drain starts. [`refused_windows`] keeps h2 0.4.20
//! from ending the connection, calls and all, when the client sends a
//! WINDOW_UPDATE for a stream the final GOAWAY refused.
//!
//! tonic's server also wrapped each request in a timeout from `grpc-timeout`
//! and its own bound, and handed the connection's TLS identity to the
//! handlers; [`call`] does both, for every route.

mod call;
mod refused_windows;
mod retire;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::service::Routes;

pub use call::CALL_BOUND;
pub use retire::{Lifetime, jittered};

use super::gate::ApiGate;
use super::pb::sticky_routing_server::{StickyRouting, StickyRoutingServer};
use super::tls::Connection;
use crate::domain::priority::Shares;
use crate::telemetry::Metrics;

/// The largest request accepted; real ones are well under 8 KiB.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The StickyRouting API as the service serves it, around any `handlers`:
/// the generated server with the message limit, behind the in-flight gate.
/// One function, so that the fuzz runs exactly what start-up serves.
pub fn api<S: StickyRouting>(
    handlers: S,
    max_in_flight: usize,
    shares: Shares,
    metrics: Arc<Metrics>,
) -> ApiGate<StickyRoutingServer<S>> {
    ApiGate::new(
        StickyRoutingServer::new(handlers).max_decoding_message_size(MAX_MESSAGE_BYTES),
        max_in_flight,
        shares,
        metrics,
    )
}

/// Streams per connection beyond the in-flight limit's share: health,
/// reflection, and calls on their way to being refused.
const STREAM_ROOM: usize = 100;
/// How often an idle connection is pinged, so that a peer that vanished
/// without a FIN is noticed.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a keepalive PING may go unanswered before the connection is
/// closed (tonic's default, kept).
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// What a listener does once the drain has started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterDrain {
    /// Close the listener: new clients go to another pod (the API port).
    StopAccepting,
    /// Keep answering new connections until the process stops, so that
    /// probes see NOT_SERVING rather than a refused connection (the
    /// plaintext health port). Connections open when the drain starts get
    /// GOAWAY all the same.
    KeepAccepting,
}

/// A gRPC server: tonic's routes behind our own HTTP/2 connections.
pub struct GrpcServer {
    routes: Routes,
    http2: http2::Builder<TokioExecutor>,
    lifetime: Lifetime,
}

impl GrpcServer {
    /// Serves `routes`, with room on each connection for `max_in_flight`
    /// calls (see [`Self::streams_per_connection`]), each connection
    /// retired as `lifetime` says.
    pub fn new(routes: Routes, max_in_flight: usize, lifetime: Lifetime) -> Self {
        let streams =
            u32::try_from(Self::streams_per_connection(max_in_flight)).unwrap_or(u32::MAX);
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(streams)
            .keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT);
        // Everything else is hyper's default, as under tonic, except one
        // improvement: tonic 0.14.9 lifts hyper's cap of 1,024 streams reset
        // for a peer's protocol errors (`max_local_error_reset_streams(None)`);
        // hyper's cap is kept here.
        Self {
            routes: routes.prepare(),
            http2,
            lifetime,
        }
    }

    /// Streams each connection may open: twice the in-flight limit, plus room
    /// for health checks, so that one busy client's excess reaches the
    /// in-flight gate and is refused at once instead of waiting in the
    /// client's HTTP/2 queue for a free stream; refused streams close at once.
    pub fn streams_per_connection(max_in_flight: usize) -> usize {
        max_in_flight.saturating_mul(2).saturating_add(STREAM_ROOM)
    }

    /// Serves the connections of `incoming` until `drain` is cancelled (or
    /// `incoming` ends); then, as `after_drain` says, stops or goes on
    /// accepting, sends GOAWAY to every connection open at that moment, and
    /// returns once every connection has closed. `stop` cuts whatever is
    /// still open, and ends the accepting.
    pub async fn serve<S>(
        self,
        incoming: S,
        drain: CancellationToken,
        stop: CancellationToken,
        after_drain: AfterDrain,
    ) where
        S: Stream<Item = io::Result<Connection>>,
    {
        let shared = Arc::new(retire::Shared {
            routes: self.routes,
            http2: self.http2,
            lifetime: self.lifetime,
            drain: drain.clone(),
            stop: stop.clone(),
        });
        let connections = TaskTracker::new();
        let accepting_until = match after_drain {
            AfterDrain::StopAccepting => drain,
            AfterDrain::KeepAccepting => stop,
        };
        // Boxed so that it can be dropped (the listener closed) before the wait.
        let mut incoming = Box::pin(incoming);
        loop {
            let accepted = tokio::select! {
                () = accepting_until.cancelled() => break,
                accepted = incoming.next() => accepted,
            };
            match accepted {
                Some(Ok(connection)) => {
                    connections.spawn(retire::serve_connection(shared.clone(), connection));
                }
                Some(Err(error)) => {
                    // Out of file descriptors, most likely: wait a little
                    // rather than spin.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                None => break,
            }
        }
        // The listener closes here, before the wait: new clients are refused
        // at once rather than left waiting in the backlog.
        drop(incoming);
        connections.close();
        connections.wait().await;
    }
}
