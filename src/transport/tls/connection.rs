//! One accepted connection, plaintext or TLS, with the client identity a
//! TLS client certificate proved, which tonic hands to every request of
//! the connection.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::Connected;

use crate::pki::ClientIdentity;

pin_project! {
    /// An accepted connection, as the gRPC server reads and writes it.
    #[project = ConnectionProj]
    pub enum Connection {
        Plain { #[pin] tcp: TcpStream },
        Tls { #[pin] tls: tokio_rustls::server::TlsStream<TcpStream>, identity: ClientIdentity },
    }
}

impl Connected for Connection {
    /// `None` on a plaintext connection.
    type ConnectInfo = Option<ClientIdentity>;

    fn connect_info(&self) -> Self::ConnectInfo {
        match self {
            Self::Plain { .. } => None,
            Self::Tls { identity, .. } => Some(identity.clone()),
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.project() {
            ConnectionProj::Plain { tcp } => tcp.poll_read(cx, buf),
            ConnectionProj::Tls { tls, .. } => tls.poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.project() {
            ConnectionProj::Plain { tcp } => tcp.poll_write(cx, buf),
            ConnectionProj::Tls { tls, .. } => tls.poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.project() {
            ConnectionProj::Plain { tcp } => tcp.poll_write_vectored(cx, bufs),
            ConnectionProj::Tls { tls, .. } => tls.poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain { tcp } => tcp.is_write_vectored(),
            Self::Tls { tls, .. } => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.project() {
            ConnectionProj::Plain { tcp } => tcp.poll_flush(cx),
            ConnectionProj::Tls { tls, .. } => tls.poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.project() {
            ConnectionProj::Plain { tcp } => tcp.poll_shutdown(cx),
            ConnectionProj::Tls { tls, .. } => tls.poll_shutdown(cx),
        }
    }
}
