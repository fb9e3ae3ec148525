//! The server's TLS files: read, parsed and checked into one rustls config.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;

use super::pem;

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

/// The files' bytes: a rotation is noticed by comparing them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsContents {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl ServerTlsFiles {
    /// Reads and checks every file into a config: what the configuration
    /// check and start-up do.
    pub fn load(&self) -> Result<Arc<ServerConfig>, TlsFileProblem> {
        self.config(&self.read()?)
    }

    /// The files' bytes, unchecked.
    pub fn read(&self) -> Result<ServerTlsContents, TlsFileProblem> {
        let read = |path: &Path, file| pem::read(path).map_err(|why| problem(file, path, &why));
        Ok(ServerTlsContents {
            cert: read(&self.cert_file, TlsFileKind::Cert)?,
            key: read(&self.key_file, TlsFileKind::Key)?,
            client_ca: match &self.client_ca_file {
                Some(path) => Some(read(path, TlsFileKind::ClientCa)?),
                None => None,
            },
        })
    }

    /// The rustls config for `contents`, as read from these files. It
    /// offers HTTP/2 alone by ALPN, as gRPC clients (grpc-go among them)
    /// require.
    pub fn config(
        &self,
        contents: &ServerTlsContents,
    ) -> Result<Arc<ServerConfig>, TlsFileProblem> {
        use TlsFileKind::{Cert, ClientCa, Key};
        let (cert_file, key_file) = (self.cert_file.as_path(), self.key_file.as_path());
        let chain =
            pem::certificates(&contents.cert).map_err(|why| problem(Cert, cert_file, &why))?;
        let key = pem::private_key(&contents.key).map_err(|why| problem(Key, key_file, &why))?;
        let provider = pem::provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| problem(Cert, cert_file, &e.to_string()))?;
        let client_ca = self
            .client_ca_file
            .as_deref()
            .zip(contents.client_ca.as_deref());
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some((ca_file, ca)) => {
                let roots = pem::roots(ca).map_err(|why| problem(ClientCa, ca_file, &why))?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| problem(ClientCa, ca_file, &e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| problem(Key, key_file, &format!("does not fit the certificate: {e}")))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A problem with `file`, at `path`.
fn problem(file: TlsFileKind, path: &Path, why: &str) -> TlsFileProblem {
    TlsFileProblem {
        file,
        why: pem::named(path, why),
    }
}
