//! One accepted connection, plaintext or TLS, and the client identity a
//! TLS client certificate proved, which tonic hands to every request of
//! the connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::Connected;

/// The URI and DNS subject alternative names of a client's certificate
/// (SPIFFE ids are URIs), each kind apart. Empty without a client
/// certificate.
///
/// Kept apart because webpki vouches for the two differently: a DNS name is
/// returned only when it is a valid DNS name, but a URI name is passed
/// through unchecked, so a URI name that reads `ops.example` proves nothing
/// about the DNS name `ops.example`. A name is matched only against names of
/// its own kind (`admin`).
#[derive(Debug, Clone, Default)]
pub struct ClientIdentity {
    uris: Arc<[String]>,
    dns_names: Arc<[String]>,
}

impl ClientIdentity {
    /// The names of the leaf certificate, which the handshake verified.
    pub fn of(certificates: Option<&[CertificateDer<'_>]>) -> Self {
        let Some(leaf) = certificates.and_then(<[_]>::first) else {
            return Self::default();
        };
        let Ok(cert) = webpki::EndEntityCert::try_from(leaf) else {
            return Self::default();
        };
        Self::new(
            cert.valid_uri_names().map(str::to_owned),
            cert.valid_dns_names().map(str::to_owned),
        )
    }

    /// An identity with these URI and DNS names, as a certificate would
    /// carry them.
    pub fn new(
        uris: impl IntoIterator<Item = String>,
        dns_names: impl IntoIterator<Item = String>,
    ) -> Self {
        Self {
            uris: uris.into_iter().collect(),
            dns_names: dns_names.into_iter().collect(),
        }
    }

    /// The certificate's URI names, as written: webpki checks only that
    /// they are UTF-8.
    pub fn uris(&self) -> &[String] {
        &self.uris
    }

    /// The certificate's DNS names, each a valid DNS name (or wildcard).
    pub fn dns_names(&self) -> &[String] {
        &self.dns_names
    }
}

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
