//! The TLS config in use, and the watcher that swaps in a new one when the
//! files change.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use tokio_util::sync::CancellationToken;

use crate::pki::{ServerTlsContents, ServerTlsFiles, TlsFileProblem};

/// How often the files are re-read. The contract allows 60 s for new
/// connections to use a rotated certificate; reading three small files
/// every few seconds costs nothing.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// The server's TLS config, kept current with its files.
pub struct ServerTls {
    files: ServerTlsFiles,
    current: ArcSwap<ServerConfig>,
    /// What the files held when last read, good or bad: a bad rotation is
    /// logged once, and retried only when the files change again.
    seen: Mutex<ServerTlsContents>,
}

impl ServerTls {
    /// Reads and checks the files; the first config must be good.
    pub fn load(files: ServerTlsFiles) -> Result<Arc<Self>, TlsFileProblem> {
        let contents = files.read()?;
        let config = files.config(&contents)?;
        Ok(Arc::new(Self {
            files,
            current: ArcSwap::new(config),
            seen: Mutex::new(contents),
        }))
    }

    /// The config for a new connection.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// Whether clients must present a certificate.
    pub fn mutual(&self) -> bool {
        self.files.client_ca_file.is_some()
    }

    /// Re-reads the files; when they changed and fit together, new
    /// connections use them. Returns whether the config was swapped.
    pub fn reload(&self) -> bool {
        let contents = match self.files.read() {
            Ok(contents) => contents,
            Err(problem) => {
                // A file mid-swap may be missing for a moment; the next
                // read decides. Logged at debug: it is usually transient.
                tracing::debug!(%problem, file = ?problem.file, "cannot read a TLS file; keeping the current config");
                return false;
            }
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if *seen == contents {
            return false;
        }
        let swapped = match self.files.config(&contents) {
            Ok(config) => {
                self.current.store(config);
                tracing::info!("TLS files changed: new connections use the new certificate");
                true
            }
            Err(problem) => {
                tracing::warn!(%problem, file = ?problem.file, "TLS files changed but cannot be used; keeping the previous certificate");
                false
            }
        };
        *seen = contents;
        swapped
    }

    /// Reloads every `every` until `stop`.
    pub async fn watch(self: Arc<Self>, every: Duration, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {
                    // File reads block; a few KiB at a time is fine, but keep
                    // them off the runtime's workers all the same.
                    let tls = self.clone();
                    let _ = tokio::task::spawn_blocking(move || tls.reload()).await;
                }
            }
        }
    }
}
