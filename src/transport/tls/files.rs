//! The server's TLS files: read, parsed and checked into one rustls config.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

/// Where the server's certificate, its key and (for mTLS) the client CA are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Set: every client must present a certificate this CA signed.
    pub client_ca_file: Option<PathBuf>,
}

/// Which file a problem is about, so that it can be reported by its variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFileKind {
    Cert,
    Key,
    ClientCa,
}

/// A TLS file that cannot be used, and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{why}")]
pub struct TlsFileProblem {
    pub file: TlsFileKind,
    pub why: String,
}

impl TlsFileProblem {
    fn new(file: TlsFileKind, why: impl Into<String>) -> Self {
        Self {
            file,
            why: why.into(),
        }
    }
}

/// The files' bytes: a rotation is noticed by comparing them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl ServerTlsFiles {
    /// Reads and checks every file into a config: what the configuration
    /// check and start-up do.
    pub fn load(&self) -> Result<Arc<ServerConfig>, TlsFileProblem> {
        build(&self.read()?)
    }

    pub(super) fn read(&self) -> Result<Contents, TlsFileProblem> {
        let read = |path: &PathBuf, file| {
            std::fs::read(path).map_err(|e| {
                TlsFileProblem::new(file, format!("cannot read {}: {e}", path.display()))
            })
        };
        Ok(Contents {
            cert: read(&self.cert_file, TlsFileKind::Cert)?,
            key: read(&self.key_file, TlsFileKind::Key)?,
            client_ca: match &self.client_ca_file {
                Some(path) => Some(read(path, TlsFileKind::ClientCa)?),
                None => None,
            },
        })
    }
}

/// The rustls config for `contents`. It offers HTTP/2 alone by ALPN, as
/// gRPC clients (grpc-go among them) require.
pub(super) fn build(contents: &Contents) -> Result<Arc<ServerConfig>, TlsFileProblem> {
    use TlsFileKind::{Cert, ClientCa, Key};
    let chain = certificates(&contents.cert, Cert)?;
    let key = PrivateKeyDer::from_pem_slice(&contents.key).map_err(|e| {
        TlsFileProblem::new(
            Key,
            format!("holds no usable PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC): {e}"),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsFileProblem::new(Cert, e.to_string()))?;
    let builder = match &contents.client_ca {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for ca in certificates(pem, ClientCa)? {
                roots.add(ca).map_err(|e| {
                    TlsFileProblem::new(ClientCa, format!("is not a usable CA certificate: {e}"))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsFileProblem::new(ClientCa, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsFileProblem::new(Key, format!("does not fit the certificate: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Every PEM certificate in `pem`; none at all is a problem.
fn certificates(
    pem: &[u8],
    file: TlsFileKind,
) -> Result<Vec<CertificateDer<'static>>, TlsFileProblem> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsFileProblem::new(file, format!("is not PEM: {e}")))?;
    match chain.is_empty() {
        true => Err(TlsFileProblem::new(file, "holds no PEM certificate")),
        false => Ok(chain),
    }
}
