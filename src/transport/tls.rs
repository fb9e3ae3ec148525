//! gRPC over TLS and mTLS, with certificates that rotate without a restart.
//!
//! tonic's own `ServerTlsConfig` reads its files once, so a certificate
//! renewed by cert-manager would need a restart to take effect. Here the
//! rustls config sits behind an `ArcSwap`. Every new connection takes the
//! current one, and a watcher swaps in a new one when the files' content
//! changes (a Kubernetes Secret's symlink swap included). A pair that does
//! not fit together, such as a rotation caught half-written, keeps the old
//! config in use and is logged once.
//!
//! The handshake runs in a task of its own ([`incoming`]), so a slow or
//! silent client delays no other. Each connection carries the identities
//! its client certificate proved ([`crate::pki::ClientIdentity`]) to the handlers,
//! which decide who may call the admin RPCs.

mod connection;
mod incoming;
mod reload;

pub use connection::Connection;
pub use incoming::{plain_incoming, tls_incoming};
pub use reload::{RELOAD_INTERVAL, ServerTls};
