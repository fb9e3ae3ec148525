//! The one PEM loader: certificates, CA roots and private keys out of PEM
//! text, for the Redis client's TLS and the gRPC server's alike, with one
//! wording for every problem.
//!
//! The parsers take bytes, since the server compares the files' bytes to
//! notice a rotation; [`in_file`] reads a file and names it in a problem.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The crypto both stacks use: ring, as fred's rustls does.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The file at `path`, whole.
pub fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot be read: {e}"))
}

/// What `parse` makes of the file at `path`; a problem names the file.
pub fn in_file<T>(path: &Path, parse: fn(&[u8]) -> Result<T, String>) -> Result<T, String> {
    read(path)
        .and_then(|pem| parse(&pem))
        .map_err(|why| named(path, &why))
}

/// A problem about the file at `path`, as every TLS problem is worded.
pub fn named(path: &Path, why: &str) -> String {
    format!("{}: {why}", path.display())
}

/// Every PEM certificate in `pem`; none at all is a problem.
pub fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("is not PEM: {e}"))?;
    match chain.is_empty() {
        true => Err("holds no PEM certificate".into()),
        false => Ok(chain),
    }
}

/// The CA certificates in `pem`, as roots to trust.
pub fn roots(pem: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for ca in certificates(pem)? {
        roots
            .add(ca)
            .map_err(|e| format!("is not a usable CA certificate: {e}"))?;
    }
    Ok(roots)
}

/// The private key in `pem`, in any form rustls reads.
pub fn private_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
        format!("holds no usable PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC): {e}")
    })
}
