//! What a command of this binary needs from its process, whichever command
//! it is (the server, `import`, `export`, `report`): the signal that stops
//! it, a stdout that a closed pipe does not panic, the wall clock as the
//! Unix milliseconds every time kept in Redis is written in, and a way to
//! run background CPU work off the runtime's workers.
//!
//! Here, below both the server's wiring and the bulk commands, so that
//! neither reaches into the other for them.

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

/// Writes `text` to stdout, ignoring a closed pipe (`import … | head`):
/// `print!` would panic there, and what is lost is only the reader's
/// choice. The exit code still says how the command went.
pub fn print_to_stdout(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// Now, in Unix milliseconds (0 before 1970, saturated far after): the
/// admission windows, the breaker's buckets and the experiment's days all
/// read the clock here.
pub fn unix_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `work` on the runtime's blocking pool, one piece at a time per `turns`
/// (a semaphore of one permit): the background ticks' CPU work (the
/// breaker's fold, the experiment's batches), which on a runtime worker
/// held up every call queued behind it, and which, all at once, took a
/// thread each. `None` if it could not finish (the runtime shutting down).
pub async fn off_the_workers<T: Send + 'static>(
    turns: &tokio::sync::Semaphore,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let _turn = turns.acquire().await.ok()?;
    tokio::task::spawn_blocking(work).await.ok()
}
