//! Following a Sentinel failover at once, not when the old primary is
//! finally demoted.
//!
//! fred asks Sentinel where the primary is only when it connects. After a
//! failover the old primary keeps its clients and keeps accepting writes
//! until Sentinel demotes it, which on Sentinel's 10 s INFO period can take
//! that long; every write acknowledged there meanwhile is lost when it
//! resyncs from the new primary. So, behind Sentinel, the store asks for the
//! primary every half second and, when the pool is connected elsewhere,
//! forces a reconnection, which asks Sentinel again.

use std::time::Duration;

use fred::clients::{Client, Pool};
use fred::interfaces::ClientLike;
use fred::prelude::{Builder, Config, Error, Options, ReconnectPolicy};
use fred::types::config::{Server, ServerConfig};

/// How often Sentinel is asked for the primary.
const INTERVAL: Duration = Duration::from_millis(500);

/// Starts the watch when `config` points at Sentinel; `None` otherwise.
pub fn spawn(config: &Config, pool: Pool) -> Result<Option<tokio::task::JoinHandle<()>>, Error> {
    let ServerConfig::Sentinel {
        hosts,
        service_name,
        username,
        password,
    } = &config.server
    else {
        return Ok(None);
    };
    let mut sentinels = Vec::with_capacity(hosts.len());
    for host in hosts {
        let mut sentinel = config.clone();
        sentinel.server = ServerConfig::Centralized {
            server: host.clone(),
        };
        sentinel.username.clone_from(username);
        sentinel.password.clone_from(password);
        sentinel.fail_fast = true;
        let client = Builder::from_config(sentinel)
            .set_policy(ReconnectPolicy::new_constant(0, 1_000))
            .build()?;
        drop(client.connect());
        sentinels.push(client);
    }
    let service_name = service_name.clone();
    Ok(Some(tokio::spawn(watch(sentinels, service_name, pool))))
}

async fn watch(sentinels: Vec<Client>, service_name: String, pool: Pool) {
    let mut ticker = tokio::time::interval(INTERVAL);
    loop {
        ticker.tick().await;
        let Some(primary) = ask(&sentinels, &service_name).await else {
            continue;
        };
        let stale: Vec<String> = pool
            .active_connections()
            .iter()
            .filter(|s| s.host != primary.host || s.port != primary.port)
            .map(ToString::to_string)
            .collect();
        if !stale.is_empty() {
            tracing::warn!(
                primary = %primary,
                connected = ?stale,
                "sentinel reports a new primary: reconnecting"
            );
            if let Err(error) = pool.force_reconnection().await {
                tracing::warn!(%error, "could not reconnect to the new primary yet");
            }
        }
    }
}

/// The primary's address from the first sentinel that answers.
async fn ask(sentinels: &[Client], service_name: &str) -> Option<Server> {
    let options = Options {
        timeout: Some(Duration::from_secs(1)),
        max_attempts: Some(1),
        fail_fast: true,
        ..Options::default()
    };
    for sentinel in sentinels {
        let reply: Result<Vec<String>, Error> = sentinel
            .with_options(&options)
            .custom(
                fred::cmd!("SENTINEL"),
                vec!["GET-MASTER-ADDR-BY-NAME", service_name],
            )
            .await;
        if let Ok([host, port]) = reply.as_deref()
            && let Ok(port) = port.parse()
        {
            return Some(Server::new(host.as_str(), port));
        }
    }
    None
}
