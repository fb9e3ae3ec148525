//! A TCP proxy between the service and Redis that injects the faults a real
//! network has: replies that come late, stall, or never come after Redis has
//! run the command, connections reset under the client, and a port that
//! refuses connections.
//!
//! Requests always reach Redis untouched; only the reply direction and the
//! connections themselves are tampered with. That is what makes "the command
//! ran, the answer was lost" testable: the case where a retry is only safe
//! with an attempt id.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What happens to replies on their way back from Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replies {
    /// Passed on as they come.
    Pass,
    /// Each passed on after this delay.
    Delay(Duration),
    /// Held until the mode changes.
    Stall,
    /// The next reply that is an array (what the scripts answer, unlike a
    /// health check's PONG) is thrown away and its connection reset; then
    /// back to [`Replies::Pass`].
    LoseNextArray,
}

/// The proxy; dropping it stops it and resets every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    replies: Arc<watch::Sender<Replies>>,
    connections: Arc<Mutex<Vec<CancellationToken>>>,
    listener: Option<(CancellationToken, JoinHandle<()>)>,
}

impl FaultProxy {
    /// A proxy to `upstream` on a free loopback port.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0)));
        let addr = listener.local_addr().unwrap();
        let mut proxy = Self {
            addr,
            upstream,
            replies: Arc::new(watch::Sender::new(Replies::Pass)),
            connections: Arc::default(),
            listener: None,
        };
        proxy.listen(listener);
        proxy
    }

    /// The `redis://` URL the service should use.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    pub fn set(&self, replies: Replies) {
        self.replies.send_replace(replies);
    }

    /// Resets every open connection (the client sees ECONNRESET).
    pub fn reset_all(&self) {
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.cancel();
        }
    }

    /// Stops listening, so connecting is refused, and resets every connection.
    pub async fn refuse(&mut self) {
        if let Some((stop, task)) = self.listener.take() {
            stop.cancel();
            let _ = task.await;
        }
        self.reset_all();
    }

    /// Listens again on the same port.
    pub fn accept(&mut self) {
        if self.listener.is_none() {
            self.listen(bind(self.addr));
        }
    }

    fn listen(&mut self, listener: TcpListener) {
        let stop = CancellationToken::new();
        let task = tokio::spawn(accept_loop(
            listener,
            self.upstream,
            self.replies.clone(),
            self.connections.clone(),
            stop.clone(),
        ));
        self.listener = Some((stop, task));
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some((stop, _)) = self.listener.take() {
            stop.cancel();
        }
        self.reset_all();
    }
}

fn bind(addr: SocketAddr) -> TcpListener {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind(addr).unwrap();
    socket.listen(128).unwrap()
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    replies: Arc<watch::Sender<Replies>>,
    connections: Arc<Mutex<Vec<CancellationToken>>>,
    stop: CancellationToken,
) {
    loop {
        let client = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => client,
                Err(_) => continue,
            },
        };
        let Ok(server) = TcpStream::connect(upstream).await else {
            continue;
        };
        let reset = CancellationToken::new();
        connections.lock().unwrap().push(reset.clone());
        tokio::spawn(relay(client, server, replies.clone(), reset));
    }
}

/// Relays one connection until either side closes or it is reset.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    mode: Arc<watch::Sender<Replies>>,
    reset: CancellationToken,
) {
    let mut replies = mode.subscribe();
    // A reset, not a close: the client sees ECONNRESET, as when a network
    // path dies. (tokio deprecates SO_LINGER because a non-zero linger
    // blocks the dropping thread; a zero linger resets at once.)
    #[allow(deprecated)]
    let _ = client.set_linger(Some(Duration::ZERO));
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    let requests = async {
        let _ = tokio::io::copy(&mut client_in, &mut server_out).await;
    };
    let answers = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_in.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            loop {
                let now = *replies.borrow_and_update();
                match now {
                    Replies::Pass => break,
                    Replies::Delay(delay) => {
                        tokio::time::sleep(delay).await;
                        break;
                    }
                    Replies::Stall => {
                        if replies.changed().await.is_err() {
                            return;
                        }
                    }
                    Replies::LoseNextArray if buf[0] == b'*' => {
                        mode.send_replace(Replies::Pass);
                        return;
                    }
                    Replies::LoseNextArray => break,
                }
            }
            if client_out.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = reset.cancelled() => {}
        () = requests => {}
        () = answers => {}
    }
}
