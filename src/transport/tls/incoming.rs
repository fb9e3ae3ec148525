//! Accepting connections for the gRPC server: plaintext as they come, TLS
//! after a handshake that runs in a task of its own, bounded in time and in
//! number, so that a slow or silent client delays no other.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_stream::Stream;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connection::Connection;
use super::reload::ServerTls;
use crate::pki::ClientIdentity;

/// The longest a client may take to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; past it, new connections are closed
/// unanswered until one finishes. Each holds a socket and a few KiB.
const MAX_HANDSHAKES: usize = 1024;

/// Plaintext connections, with Nagle off: answers are small and must not
/// wait for the client's delayed ACK.
pub fn plain_incoming(listener: TcpListener) -> impl Stream<Item = io::Result<Connection>> {
    TcpListenerStream::new(listener).map(|accepted| {
        accepted.map(|tcp| {
            let _ = tcp.set_nodelay(true);
            Connection::Plain { tcp }
        })
    })
}

/// TLS connections whose handshake completed. The accept loop and the
/// handshakes in progress end at `stop`, or when the server stops taking
/// connections (it drops the stream).
pub fn tls_incoming(
    listener: TcpListener,
    tls: Arc<ServerTls>,
    tasks: &TaskTracker,
    stop: CancellationToken,
) -> impl Stream<Item = io::Result<Connection>> + use<> {
    let (ready, connections) = mpsc::channel(64);
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    let spawner = tasks.clone();
    tasks.spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = ready.closed() => return,
                () = stop.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let tcp = match accepted {
                Ok((tcp, _)) => tcp,
                Err(error) => {
                    // Out of file descriptors, most likely: wait a little
                    // rather than spin.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = handshakes.clone().try_acquire_owned() else {
                tracing::debug!("too many TLS handshakes in progress; closing a new connection");
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = TlsAcceptor::from(tls.current());
            let (ready, stop) = (ready.clone(), stop.clone());
            spawner.spawn(async move {
                let handshake = tokio::select! {
                    () = stop.cancelled() => return,
                    handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)) => handshake,
                };
                drop(permit);
                match handshake {
                    Ok(Ok(stream)) => {
                        let identity = ClientIdentity::of(stream.get_ref().1.peer_certificates());
                        let _ = ready.send(Ok(Connection::Tls { tls: stream, identity })).await;
                    }
                    // A client that does not trust us, or has no certificate
                    // we trust: its own error says why. Not worth a warning
                    // per attempt (scanners, probes).
                    Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                    Err(_) => tracing::debug!("TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(connections)
}
