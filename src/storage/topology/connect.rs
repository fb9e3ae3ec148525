//! Every fred client the storage layer makes, with its connection settings
//! in one place: the service's pools (each node's request and background
//! lanes, `lanes.rs`), a Cluster seed's short-lived
//! discovery client, Sentinel's clients, and the export's scanning client.
//!
//! Each kind differs on purpose, and the reasons sit beside each: the
//! service's pools never resend a command (a write whose connection died
//! may have run), while the export, which only reads, may.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::{Client, Pool};
use fred::interfaces::EventInterface;
use fred::prelude::{Builder, Config, Error, ReconnectPolicy};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::super::error::ConnectError;
use super::super::settings::RedisSettings;

/// How long a pool may take to open a connection.
pub(in crate::storage) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);

/// fred's configuration for `redis`: the URL, with the credentials and TLS
/// files of their own settings.
pub(in crate::storage) fn client_config(redis: &RedisSettings) -> Result<Config, ConnectError> {
    let mut config = Config::from_url(redis.url.expose()).map_err(ConnectError::Url)?;
    if let Some(username) = &redis.username {
        config.username = Some(username.clone());
    }
    if let Some(password) = &redis.password {
        config.password = Some(password.expose().to_owned());
    }
    if let Some(files) = &redis.tls {
        let tls = super::super::tls::client_config(files)?;
        config.tls = Some(tls.into());
    }
    Ok(config)
}

/// The first server `config` names, to name a single node before it is
/// polled (behind Sentinel, the poll names the primary).
pub(super) fn first_host(config: &Config) -> String {
    config
        .server
        .hosts()
        .first()
        .map_or_else(|| "-".to_owned(), ToString::to_string)
}

/// A service pool of `size` connections for `config`, connecting in the
/// background; each connection's errors are reported to `problem` on
/// `tasks` until `stop`. A node's request and background pools are both
/// made here (`lanes.rs`), so they connect, reconnect and log in alike.
pub(super) fn start_pool(
    config: Config,
    redis: &RedisSettings,
    size: usize,
    queue_limit: usize,
    problem: &Arc<Mutex<Option<String>>>,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) -> Result<Pool, Error> {
    let pool = Builder::from_config(config)
        .with_connection_config(|c| {
            // One attempt: a command whose connection died in flight may
            // have run; resending it could apply a write twice.
            c.max_command_attempts = 1;
            c.connection_timeout = CONNECTION_TIMEOUT;
            c.internal_command_timeout = Duration::from_secs(2);
            c.unresponsive.max_timeout = Some(Duration::from_secs(2));
            c.unresponsive.interval = Duration::from_millis(500);
            c.tcp.nodelay = Some(true);
            // A bounded queue: past it a call is refused at once, with
            // nothing sent, instead of waiting out its deadline.
            c.max_command_buffer_len = queue_limit;
        })
        .with_performance_config(|p| p.default_command_timeout = redis.command_timeout)
        .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
        .build_pool(size)?;
    for client in pool.clients() {
        let errors = report_connection_errors(client.error_rx(), problem.clone());
        spawn_until_stopped(tasks, stop, errors);
    }
    // fred's own connection tasks run until `quit`; their handles are not
    // needed.
    drop(pool.connect_pool());
    Ok(pool)
}

/// A Cluster seed's client, for one `CLUSTER SLOTS`: it fails fast and
/// gives up on a silent node within its timeouts.
pub(super) fn discovery_client(mut config: Config) -> Result<Client, Error> {
    config.fail_fast = true;
    Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = CONNECTION_TIMEOUT;
            c.internal_command_timeout = CONNECTION_TIMEOUT;
        })
        .build()
}

/// A builder of one sentinel's clients (its queries, its events):
/// reconnecting every second for ever.
pub(super) fn sentinel_builder(config: Config) -> Builder {
    let mut builder = Builder::from_config(config);
    builder.set_policy(ReconnectPolicy::new_constant(0, 1_000));
    builder
}

/// The export's client: it only reads, so a read may be sent again after a
/// reconnect (three attempts), and an unreachable Redis is an error at
/// once rather than a reconnect loop (a silent peer fails once its
/// handshake has had [`CONNECTION_TIMEOUT`]).
pub(in crate::storage) fn scan_client(redis: &RedisSettings) -> Result<Client, ConnectError> {
    let mut config = client_config(redis)?;
    config.fail_fast = true;
    Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = CONNECTION_TIMEOUT;
            c.internal_command_timeout = CONNECTION_TIMEOUT;
            c.max_command_attempts = 3;
            c.tcp.nodelay = Some(true);
        })
        .with_performance_config(|p| p.default_command_timeout = redis.command_timeout)
        .set_policy(ReconnectPolicy::new_exponential(3, 100, 2_000, 2))
        .build()
        .map_err(ConnectError::Client)
}

/// Runs `task` on `tasks` until `stop` is cancelled: how every background
/// task of the store starts, so `quit` ends them all.
pub(in crate::storage) fn spawn_until_stopped(
    tasks: &TaskTracker,
    stop: &CancellationToken,
    task: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let stop = stop.clone();
    tasks.spawn(async move {
        stop.run_until_cancelled(task).await;
    });
}

/// Logs each new connection error once (a reconnect loop repeats the same
/// one every backoff) and keeps the latest for readiness.
async fn report_connection_errors(
    mut errors: tokio::sync::broadcast::Receiver<(Error, Option<fred::types::config::Server>)>,
    latest: Arc<Mutex<Option<String>>>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let (error, server) = match errors.recv().await {
            Ok(event) => event,
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        let text = error.to_string();
        let server = server.map_or_else(|| "-".to_owned(), |s| s.to_string());
        let Ok(mut last) = latest.lock() else { return };
        if last.as_deref() != Some(text.as_str()) {
            tracing::warn!(%server, error = %text, "redis connection failed");
            *last = Some(text);
        }
    }
}
