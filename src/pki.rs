//! Certificates and keys, as both TLS stacks use them: PEM files read and
//! checked by one loader ([`pem`]), the server's TLS files and the rustls
//! config they make, and the identities a client certificate proves with
//! the list of those allowed the admin RPCs.
//!
//! Here, below configuration, storage and transport: configuration checks
//! these files and names at start and reports each problem by its
//! variable, storage builds its Redis client config from PEM files, and
//! transport serves with the server config and admits by identity. None of
//! them need reach into another for it.

mod admin;
mod identity;
pub mod pem;
mod server;

pub use admin::{AdminClients, AdminNames};
pub use identity::ClientIdentity;
pub use server::{ServerTlsContents, ServerTlsFiles, TlsFileKind, TlsFileProblem};
