//! TLS to Redis: a rustls client config built from PEM files.
//!
//! Redis deployments with TLS usually sign their certificates with a private
//! CA, so the operator names that CA's file; without one the system roots
//! are trusted. A client certificate is optional (Redis's
//! `tls-auth-clients`). The files are read at start-up, and the config
//! check reads them too, so a missing or unparsable file is reported by its
//! variable before the service runs.

use std::path::PathBuf;

use rustls::{ClientConfig, RootCertStore};

use crate::pki::pem;

/// PEM files for TLS to Redis.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificates to trust instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key, for Redis with `tls-auth-clients`.
    pub client_cert: Option<ClientCertFiles>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// Which file a TLS problem is about, so config checking can name its
/// variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    Ca,
    Cert,
    Key,
}

/// A TLS file that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
#[error("{why}")]
pub struct TlsError {
    pub file: TlsFile,
    pub why: String,
}

impl TlsError {
    fn new(file: TlsFile, why: String) -> Self {
        Self { file, why }
    }
}

/// Builds the client config: trust from `files.ca_file` (else the system
/// roots), identity from `files.client_cert` when given.
pub fn client_config(files: &TlsFiles) -> Result<ClientConfig, TlsError> {
    let roots = match &files.ca_file {
        Some(path) => {
            pem::in_file(path, pem::roots).map_err(|why| TlsError::new(TlsFile::Ca, why))?
        }
        None => system_roots(),
    };
    let builder = ClientConfig::builder_with_provider(pem::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new(TlsFile::Ca, e.to_string()))?
        .with_root_certificates(roots);
    match &files.client_cert {
        None => Ok(builder.with_no_client_auth()),
        Some(client) => {
            let (chain, key) = identity_from(client)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                let why = format!("does not fit the certificate: {e}");
                TlsError::new(TlsFile::Key, pem::named(&client.key_file, &why))
            })
        }
    }
}

/// Checks every file in `files`, reporting each unusable one.
pub fn check_files(files: &TlsFiles) -> Vec<TlsError> {
    let mut problems = Vec::new();
    if let Some(path) = &files.ca_file {
        problems.extend(
            pem::in_file(path, pem::roots)
                .err()
                .map(|why| TlsError::new(TlsFile::Ca, why)),
        );
    }
    if let Some(client) = &files.client_cert {
        match identity_from(client) {
            Err(problem) => problems.push(problem),
            Ok(_) if problems.is_empty() => problems.extend(client_config(files).err()),
            Ok(_) => {}
        }
    }
    problems
}

type Identity = (
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
);

fn identity_from(client: &ClientCertFiles) -> Result<Identity, TlsError> {
    let chain = pem::in_file(&client.cert_file, pem::certificates)
        .map_err(|why| TlsError::new(TlsFile::Cert, why))?;
    let key = pem::in_file(&client.key_file, pem::private_key)
        .map_err(|why| TlsError::new(TlsFile::Key, why))?;
    Ok((chain, key))
}

/// The operating system's roots. Unreadable ones are skipped; rustls then
/// refuses the server, and the connection error says so.
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sticky-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[test]
    fn missing_and_empty_files_are_named() {
        let empty = temp_file("empty.pem", "");
        let files = TlsFiles {
            ca_file: Some(empty.clone()),
            client_cert: Some(ClientCertFiles {
                cert_file: "/nonexistent/cert.pem".into(),
                key_file: empty,
            }),
        };
        let problems = check_files(&files);
        let kinds: Vec<TlsFile> = problems.iter().map(|p| p.file).collect();
        assert_eq!(kinds, [TlsFile::Ca, TlsFile::Cert], "{problems:?}");
        assert!(problems[0].why.contains("empty.pem"), "{problems:?}");
        assert!(
            problems[1].why.contains("/nonexistent/cert.pem"),
            "{problems:?}"
        );
    }

    #[test]
    fn no_files_means_the_system_roots() {
        assert!(check_files(&TlsFiles::default()).is_empty());
        assert!(client_config(&TlsFiles::default()).is_ok());
    }
}
