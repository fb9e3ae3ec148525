//! One connection's life: served until its age (drawn for it alone) or the
//! drain, then told to go away with GOAWAY, given until its streams end,
//! and cut only if a stream is still open a grace after the GOAWAY.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic::transport::server::Connected;

use super::call::CallService;
use super::refused_windows::RefusedWindows;
use crate::transport::tls::Connection;

/// How long a connection is served before it is told to go away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// The age at which a connection gets GOAWAY, ±10 % for each connection.
    pub max_age: Duration,
    /// How long streams still open at the GOAWAY may run before they are cut.
    pub grace: Duration,
}

/// What every connection of one server shares.
pub(super) struct Shared {
    pub routes: Routes,
    pub http2: http2::Builder<TokioExecutor>,
    pub lifetime: Lifetime,
    /// Cancelled when the drain starts: every connection then gets GOAWAY.
    pub drain: CancellationToken,
    /// Cancelled when the process stops: every connection gets GOAWAY and,
    /// a moment later, is cut.
    pub stop: CancellationToken,
}

/// Why a connection was told to go away.
#[derive(Debug, Clone, Copy)]
enum Retired {
    Age,
    Drain,
    Stop,
}

/// How long a connection has, once the process stops, to finish its GOAWAY
/// exchange before it is cut.
const LAST_WORDS: Duration = Duration::from_secs(1);

/// Serves `connection` until it closes, retiring it as [`Shared`] says:
/// GOAWAY at its age, at the drain or at the stop, whichever comes first.
pub(super) async fn serve_connection(shared: Arc<Shared>, connection: Connection) {
    let service = CallService::new(shared.routes.clone(), connection.connect_info());
    // h2 0.4.20 would end the connection on a WINDOW_UPDATE for a stream
    // its final GOAWAY refused: see `refused_windows`.
    let retiring = Arc::new(AtomicBool::new(false));
    let io = RefusedWindows::new(connection, retiring.clone());
    let served = shared.http2.serve_connection(TokioIo::new(io), service);
    tokio::pin!(served);
    let age = jittered(shared.lifetime.max_age);
    // A connection accepted after the drain started (the health port keeps
    // accepting) is served normally: it is a probe, and the process's stop
    // ends it.
    let drain = async {
        if shared.drain.is_cancelled() {
            std::future::pending::<()>().await;
        }
        shared.drain.cancelled().await;
    };
    let retired = tokio::select! {
        result = served.as_mut() => return closed(result),
        () = tokio::time::sleep(age) => Retired::Age,
        () = drain => Retired::Drain,
        () = shared.stop.cancelled() => Retired::Stop,
    };
    retiring.store(true, Ordering::Release);
    served.as_mut().graceful_shutdown();
    // At its age a connection has the grace; on a drain the shutdown grace
    // bounds the wait, and `stop` ends it.
    let cut = async {
        match retired {
            Retired::Age => tokio::time::sleep(shared.lifetime.grace).await,
            Retired::Drain | Retired::Stop => std::future::pending().await,
        }
    };
    let stopped = async {
        shared.stop.cancelled().await;
        // Time to finish the GOAWAY exchange (one round trip) before the
        // process exits, so that even a connection accepted or retired a
        // moment before the stop is told why it closes.
        tokio::time::sleep(LAST_WORDS).await;
    };
    tokio::select! {
        // First, so that the GOAWAY is written before a stop can cut.
        biased;
        result = served.as_mut() => closed(result),
        () = cut => tracing::info!(
            ?age,
            grace = ?shared.lifetime.grace,
            "cut a connection whose streams were still open a grace after its GOAWAY"
        ),
        () = stopped => tracing::debug!(?retired, "cut a connection at the stop"),
    }
}

/// Logs how a connection ended, when it ended badly. A client that goes
/// away without a word is common and no fault of ours: debug, not warn.
fn closed(result: hyper::Result<()>) {
    if let Err(error) = result {
        tracing::debug!(%error, "a connection ended with an error");
    }
}

/// `age` moved by up to ±10 %, drawn afresh on each call: connections
/// opened together, on one pod or many, do not all get GOAWAY at the same
/// moment and reconnect in one wave.
pub fn jittered(age: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // A random number from the standard library's hash keys, which differ
    // for every `RandomState` made.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    // 9,000 to 11,000 ten-thousandths: 0.9 to 1.1.
    let per_ten_thousand = 9_000 + u32::try_from(random % 2_001).unwrap_or(1_000);
    age.saturating_mul(per_ten_thousand) / 10_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_age_moves_by_at_most_ten_percent() {
        let age = Duration::from_secs(300);
        let ages: Vec<Duration> = (0..200).map(|_| jittered(age)).collect();
        assert!(
            ages.iter()
                .all(|a| *a >= age * 9 / 10 && *a <= age * 11 / 10)
        );
        // Spread over the range, not one value: at least a fifth of it.
        let (low, high) = (ages.iter().min().unwrap(), ages.iter().max().unwrap());
        assert!(*high - *low >= age / 25, "{low:?}..{high:?}");
        assert!(
            jittered(Duration::MAX) > Duration::from_secs(1),
            "saturates, never panics"
        );
    }
}
