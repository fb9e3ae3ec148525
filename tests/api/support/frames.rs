//! What the server says on the wire: a client-side IO wrapper that parses
//! every HTTP/2 frame the server sends (after TLS, when there is TLS), and a
//! tonic channel whose every connection goes through one, so that a test
//! sees each GOAWAY and PING with the time it arrived, whatever client
//! library made the calls.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::codegen::Bytes;
use tonic::transport::{Channel, Endpoint};

pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
/// The largest stream id: a first, graceful GOAWAY names it.
pub const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// One frame the server sent, on the `connection`-th connection (from 0).
#[derive(Debug, Clone)]
pub struct Frame {
    pub connection: usize,
    pub at: Instant,
    pub kind: u8,
    pub flags: u8,
    /// For GOAWAY: the last stream id it names, and its error code.
    pub goaway: Option<(u32, u32)>,
    /// For PING: its eight bytes, which an acknowledgement echoes.
    pub ping: Option<[u8; 8]>,
}

/// What the server sent, and when each connection ended (EOF or error).
#[derive(Debug, Default)]
pub struct Log {
    pub frames: Vec<Frame>,
    pub closed: Vec<(usize, Instant)>,
    pub opened: Vec<Instant>,
    /// The connections whose client sent its race (see [`Wire::h2_on`]).
    pub raced: Vec<(usize, Instant)>,
}

/// A shared [`Log`] for every connection of one client.
#[derive(Debug, Clone, Default)]
pub struct Wire(Arc<Mutex<Log>>);

impl Wire {
    pub fn snapshot<T>(&self, read: impl FnOnce(&Log) -> T) -> T {
        read(&self.0.lock().unwrap())
    }

    /// The GOAWAY frames seen so far, in order.
    pub fn goaways(&self) -> Vec<Frame> {
        self.snapshot(|log| {
            log.frames
                .iter()
                .filter(|f| f.kind == GOAWAY)
                .cloned()
                .collect()
        })
    }

    pub fn connections(&self) -> usize {
        self.snapshot(|log| log.opened.len())
    }

    /// Wraps a new connection's IO; its frames go to this log.
    pub fn tap<T>(&self, io: T) -> Tap<T> {
        let connection = {
            let mut log = self.0.lock().unwrap();
            log.opened.push(Instant::now());
            log.opened.len() - 1
        };
        Tap {
            io,
            wire: self.clone(),
            connection,
            pending: Vec::new(),
            race: None,
            outbox: Vec::new(),
        }
    }

    /// A raw HTTP/2 connection to `addr`, tapped, whose connection task runs
    /// (answering PINGs) until the server closes it: unlike a channel, it
    /// never gives up a connection that was told to go away.
    pub async fn h2(&self, addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
        let tcp = TcpStream::connect(addr).await.unwrap();
        self.h2_on(tcp, None).await
    }

    /// [`Self::h2`] over `io`, a connection already made (TLS). With
    /// `race`, the client races the server's GOAWAY as a client that
    /// started a call before it read it: `race`'s bytes go out in the same
    /// write as its acknowledgement of the PING that follows the first
    /// GOAWAY, right after it.
    pub async fn h2_on<T>(&self, io: T, race: Option<Vec<u8>>) -> h2::client::SendRequest<Bytes>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut tap = self.tap(io);
        tap.race = race;
        let (client, connection) = h2::client::handshake(tap).await.unwrap();
        tokio::spawn(connection);
        client.ready().await.unwrap()
    }

    /// An HTTP/2 peer on `addr` that opens no stream and never closes: it
    /// acknowledges the server's SETTINGS and PINGs, and reads until the
    /// server closes the connection. (h2's and hyper's clients close an
    /// idle connection themselves on the first GOAWAY, before they answer
    /// its PING, which would hide whether the server ends the two steps.)
    pub async fn idle_peer(&self, addr: SocketAddr) {
        self.idle_peer_on(TcpStream::connect(addr).await.unwrap())
            .await;
    }

    /// [`Self::idle_peer`] over `io`, a connection already made (TLS).
    pub async fn idle_peer_on<T>(&self, io: T)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tap = self.tap(io);
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend_from_slice(&frame(SETTINGS, 0, &[]));
        tap.write_all(&hello).await.unwrap();
        let connection = tap.connection;
        let wire = self.clone();
        tokio::spawn(async move {
            let mut buf = [0; 4096];
            let mut answered = 0;
            while matches!(tap.read(&mut buf).await, Ok(n) if n > 0) {
                let due: Vec<Vec<u8>> = wire.snapshot(|log| {
                    let mine: Vec<_> = log
                        .frames
                        .iter()
                        .filter(|f| f.connection == connection)
                        .collect();
                    let due = mine[answered..]
                        .iter()
                        .filter(|f| f.flags & 1 == 0)
                        .filter_map(|f| match (f.kind, f.ping) {
                            (SETTINGS, _) => Some(frame(SETTINGS, 1, &[])),
                            (PING, Some(payload)) => Some(frame(PING, 1, &payload)),
                            _ => None,
                        })
                        .collect();
                    answered = mine.len();
                    due
                });
                for answer in due {
                    if tap.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            }
        });
    }

    /// A plaintext channel to `addr` whose connections are tapped.
    pub async fn channel(&self, addr: SocketAddr) -> Channel {
        let wire = self.clone();
        Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_with_connector(tower::service_fn(move |_| {
                let wire = wire.clone();
                async move {
                    let tcp = TcpStream::connect(addr).await?;
                    tcp.set_nodelay(true)?;
                    Ok::<_, io::Error>(TokioIo::new(wire.tap(tcp)))
                }
            }))
            .await
            .unwrap()
    }
}

/// An IO whose incoming bytes are parsed as HTTP/2 frames into a [`Wire`].
pub struct Tap<T> {
    io: T,
    wire: Wire,
    connection: usize,
    /// Bytes of a frame not yet whole.
    pending: Vec<u8>,
    /// What to send with the acknowledgement of the GOAWAY's PING.
    race: Option<Vec<u8>>,
    /// Bytes accepted from the client library, not yet written.
    outbox: Vec<u8>,
}

impl<T> Tap<T> {
    fn record(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let now = Instant::now();
        let mut log = self.wire.0.lock().unwrap();
        loop {
            if self.pending.len() < 9 {
                return;
            }
            let h = &self.pending[..9];
            let length = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
            if self.pending.len() < 9 + length {
                return;
            }
            let payload = &self.pending[9..9 + length];
            let goaway = (h[3] == GOAWAY && length >= 8).then(|| {
                let last = u32::from_be_bytes(payload[..4].try_into().unwrap()) & MAX_STREAM_ID;
                let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
                (last, code)
            });
            let ping = (h[3] == PING && length == 8).then(|| payload[..8].try_into().unwrap());
            log.frames.push(Frame {
                connection: self.connection,
                at: now,
                kind: h[3],
                flags: h[4],
                goaway,
                ping,
            });
            self.pending.drain(..9 + length);
        }
    }

    /// Where the acknowledgement of the PING that followed this
    /// connection's first GOAWAY ends in `bytes`, if it is there.
    fn goaway_ping_ack_end(&self, bytes: &[u8]) -> Option<usize> {
        let payload = self.wire.snapshot(|log| {
            let mine = log
                .frames
                .iter()
                .filter(|f| f.connection == self.connection);
            mine.skip_while(|f| f.kind != GOAWAY)
                .find(|f| f.kind == PING && f.flags & 1 == 0)
                .and_then(|f| f.ping)
        })?;
        let ack = frame(PING, 1, &payload);
        let at = bytes.windows(ack.len()).position(|w| w == ack.as_slice())?;
        Some(at + ack.len())
    }

    fn closed(&self) {
        let mut log = self.wire.0.lock().unwrap();
        if !log.closed.iter().any(|(c, _)| *c == self.connection) {
            log.closed.push((self.connection, Instant::now()));
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tap<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.io).poll_read(cx, buf);
        match &result {
            Poll::Ready(Ok(())) if buf.filled().len() == before => self.closed(),
            Poll::Ready(Ok(())) => {
                let read = buf.filled()[before..].to_vec();
                self.record(&read);
            }
            Poll::Ready(Err(_)) => self.closed(),
            Poll::Pending => {}
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> Tap<T> {
    /// Writes what is left of a racing write.
    fn poll_outbox(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.outbox.is_empty() {
            let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, &self.outbox))?;
            self.outbox.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tap<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_outbox(cx))?;
        let ack_end = match self.race {
            Some(_) => self.goaway_ping_ack_end(buf),
            None => None,
        };
        if let Some(at) = ack_end {
            // One write: what the library wrote up to its acknowledgement,
            // the race, then the rest.
            let race = self.race.take().unwrap();
            let connection = self.connection;
            self.wire
                .0
                .lock()
                .unwrap()
                .raced
                .push((connection, Instant::now()));
            self.outbox = [&buf[..at], &race, &buf[at..]].concat();
            if let Poll::Ready(Err(error)) = self.poll_outbox(cx) {
                return Poll::Ready(Err(error));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_outbox(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// One unary gRPC call over a raw HTTP/2 connection: its `grpc-status`, or
/// the HTTP/2 error that ended the stream.
pub async fn unary(
    client: &mut h2::client::SendRequest<Bytes>,
    path: &str,
    message: impl prost::Message,
) -> Result<String, h2::Error> {
    let request = http::Request::post(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false)?;
    send.send_data(grpc_message(message).into(), true)?;
    let response = response.await?;
    if let Some(status) = response.headers().get("grpc-status") {
        return Ok(status.to_str().unwrap().to_owned());
    }
    let mut body = response.into_body();
    while let Some(data) = body.data().await {
        data?;
    }
    let trailers = body.trailers().await?.expect("trailers");
    Ok(trailers["grpc-status"].to_str().unwrap().to_owned())
}

/// `message` as a gRPC body carries it: uncompressed, length first.
pub fn grpc_message(message: impl prost::Message) -> Vec<u8> {
    let encoded = message.encode_to_vec();
    let mut body = vec![0];
    body.extend_from_slice(&u32::try_from(encoded.len()).unwrap().to_be_bytes());
    body.extend_from_slice(&encoded);
    body
}

/// A frame on stream 0.
fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    frame_on(0, kind, flags, payload)
}

/// A frame on `stream`.
pub fn frame_on(stream: u32, kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = vec![length[1], length[2], length[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}
