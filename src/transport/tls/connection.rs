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
/// (SPIFFE ids are URIs). Empty without a client certificate.
#[derive(Debug, Clone, Default)]
pub struct ClientIdentity {
    names: Arc<[String]>,
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
        let names: Vec<String> = cert
            .valid_uri_names()
            .chain(cert.valid_dns_names())
            .map(str::to_owned)
            .collect();
        Self {
            names: names.into(),
        }
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// An identity with these names, as a certificate would carry them.
    pub fn from_names(names: impl IntoIterator<Item = String>) -> Self {
        Self {
            names: names.into_iter().collect(),
        }
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
