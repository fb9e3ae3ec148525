//! What a client certificate proves: its URI and DNS names.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;

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
