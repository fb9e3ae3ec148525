//! Reading every customer hash at once, for `sticky-routing export`: SCAN
//! (never KEYS, which blocks Redis for the whole keyspace) on every primary,
//! and the hashes each page names, fetched in one pipeline per page.
//!
//! This is the one bulk read in the crate, and it runs in a command-line
//! process, not in the server, so it uses fred's own clients rather than
//! the store's per-primary pools: a failover during an export ends it (exit
//! 2, run it again), which is what an operator expects of a one-off dump.
//! Reads are idempotent, so unlike the store's writes they may be retried
//! after a dropped connection.
//!
//! On Cluster every primary is scanned at once, each on its own connection
//! (fred's `split_cluster`), so a page's keys are all on the node that
//! fetches them. On one node, and behind Sentinel, the one primary is.
//! Within a node the next SCAN page is asked for while the current page's
//! hashes are fetched, so the two round trips overlap.

use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, HashesInterface};
use fred::prelude::{Builder, Error, ErrorKind, ReconnectPolicy, Value};
use fred::types::{ClusterHash, CustomCommand};
use tokio::sync::mpsc;

use super::error::ConnectError;
use super::settings::RedisSettings;
use super::store::{CONNECTION_TIMEOUT, client_config};

/// Keys asked for per SCAN page, and so hashes per pipeline: large enough
/// that round trips cost little, small enough that a page stays a small
/// slice of Redis's time (HGETALL of a capped, listpack-encoded hash is
/// cheap).
const PAGE_SIZE: u32 = 1_000;
/// Pages read ahead of the writer, per primary.
const PAGES_AHEAD: usize = 2;

/// Why a bulk read failed: the message names the problem for the operator.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(transparent)]
    Settings(#[from] ConnectError),
    #[error("cannot connect to redis: {0}")]
    Connect(String),
    #[error("redis failed during the read: {0}")]
    Read(String),
}

/// One key a SCAN page named, and what HGETALL found under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedHash {
    pub key: Vec<u8>,
    pub contents: HashContents,
}

/// A hash's fields and values, as bytes.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashContents {
    /// Every field and value; empty when the key expired or was deleted
    /// between SCAN and HGETALL.
    Fields(Fields),
    /// The key holds no hash (Redis answered WRONGTYPE).
    NotAHash,
}

/// Connections to every primary, ready to scan.
pub struct HashScanner {
    client: Client,
    /// The clients that scan: each primary's own on Cluster, else `client`.
    nodes: Vec<Client>,
    /// How long one page may take: its hashes and the next page's keys.
    page_within: Duration,
}

impl HashScanner {
    /// Connects with `redis` (URL, user, password, TLS files): to the
    /// node, the Sentinel-named primary, or every primary of a Cluster, all
    /// within `start_within`. Each page of the scan is then read within
    /// `redis.command_timeout`.
    pub async fn connect(redis: &RedisSettings, start_within: Duration) -> Result<Self, ScanError> {
        let mut config = client_config(redis)?;
        // An unreachable Redis is an error now, not a reconnect loop: a
        // refused connection fails at once, a silent peer once its
        // handshake has had `CONNECTION_TIMEOUT`.
        config.fail_fast = true;
        let client = Builder::from_config(config)
            .with_connection_config(|c| {
                c.connection_timeout = CONNECTION_TIMEOUT;
                c.internal_command_timeout = CONNECTION_TIMEOUT;
                c.max_command_attempts = 3;
                c.tcp.nodelay = Some(true);
            })
            .with_performance_config(|p| p.default_command_timeout = redis.command_timeout)
            .set_policy(ReconnectPolicy::new_exponential(3, 100, 2_000, 2))
            .build()
            .map_err(ConnectError::Client)?;
        let nodes = match tokio::time::timeout(start_within, connect_all(&client)).await {
            Ok(nodes) => nodes?,
            Err(_) => {
                return Err(ScanError::Connect(format!(
                    "no connection within {start_within:?}"
                )));
            }
        };
        Ok(Self {
            client,
            nodes,
            page_within: redis.command_timeout,
        })
    }

    /// How many primaries are scanned.
    pub fn primaries(&self) -> usize {
        self.nodes.len()
    }

    /// Every key matching `pattern` on every primary, with its hash, in
    /// pages. A key may appear twice if it moves during the scan (SCAN's
    /// own guarantee), and the order is Redis's. The stream ends after an
    /// error; dropping the receiver stops the reads.
    pub fn scan(&self, pattern: &str) -> mpsc::Receiver<Result<Vec<ScannedHash>, ScanError>> {
        let (pages, receiver) = mpsc::channel(PAGES_AHEAD * self.nodes.len());
        for node in &self.nodes {
            let scan = scan_node(
                node.clone(),
                pattern.to_owned(),
                self.page_within,
                pages.clone(),
            );
            tokio::spawn(scan);
        }
        receiver
    }

    /// Closes every connection.
    pub async fn quit(&self) {
        for node in &self.nodes {
            let _ = node.quit().await;
        }
        let _ = self.client.quit().await;
    }
}

/// The clients that scan, connected: `client` itself, or on Cluster one
/// per primary.
async fn connect_all(client: &Client) -> Result<Vec<Client>, ScanError> {
    let connect = |error: Error| ScanError::Connect(error.to_string());
    client.init().await.map_err(connect)?;
    if !client.is_clustered() {
        return Ok(vec![client.clone()]);
    }
    let nodes = client.split_cluster().map_err(connect)?;
    for node in &nodes {
        node.init().await.map_err(connect)?;
    }
    Ok(nodes)
}

/// Scans one primary to its end, sending each page's hashes to `pages`.
/// Each step (the first page's keys; then a page's hashes together with
/// the next page's keys, asked for at once) must end within `page_within`
/// of its start: one deadline for the step's two calls, whatever each of
/// them meets inside fred (a retry after a dropped connection, a queue
/// while it reconnects), so a dead or frozen Redis ends the scan then.
async fn scan_node(
    node: Client,
    pattern: String,
    page_within: Duration,
    pages: mpsc::Sender<Result<Vec<ScannedHash>, ScanError>>,
) {
    let read = |error: Error| ScanError::Read(error.to_string());
    let late = || ScanError::Read(format!("no answer within {page_within:?}"));
    let mut page = tokio::time::timeout(page_within, scan_page(&node, "0".into(), &pattern))
        .await
        .map_or_else(|_| Err(late()), |page| page.map_err(read));
    loop {
        let (cursor, keys) = match page {
            Ok(page) => page,
            Err(error) => {
                let _ = pages.send(Err(error)).await;
                return;
            }
        };
        let more = cursor != "0";
        let step = tokio::time::timeout(page_within, async {
            tokio::join!(fetch_hashes(&node, keys), async {
                if more {
                    Some(scan_page(&node, cursor, &pattern).await)
                } else {
                    None
                }
            })
        });
        let (hashes, next) = match step.await {
            Ok((hashes, next)) => (hashes.map_err(read), next.map(|next| next.map_err(read))),
            Err(_) => (Err(late()), None),
        };
        let failed = hashes.is_err();
        if pages.send(hashes).await.is_err() || failed {
            return;
        }
        match next {
            Some(next) => page = next,
            None => return,
        }
    }
}

/// `SCAN cursor MATCH pattern COUNT n`: the next cursor and the page's keys.
async fn scan_page(
    node: &Client,
    cursor: String,
    pattern: &str,
) -> Result<(String, Vec<Vec<u8>>), Error> {
    let command = CustomCommand::new_static("SCAN", ClusterHash::FirstKey, false);
    let args = vec![
        Value::from(cursor),
        Value::from("MATCH"),
        Value::from(pattern),
        Value::from("COUNT"),
        Value::from(PAGE_SIZE),
    ];
    let reply: Value = node.custom(command, args).await?;
    let unexpected = || Error::new(ErrorKind::Protocol, "SCAN answered an unexpected reply");
    let Value::Array(mut parts) = reply else {
        return Err(unexpected());
    };
    let (Some(keys), Some(cursor)) = (parts.pop(), parts.pop()) else {
        return Err(unexpected());
    };
    let cursor = cursor.into_string().ok_or_else(unexpected)?;
    let keys = match keys {
        Value::Array(keys) => keys.into_iter().filter_map(bytes_of).collect(),
        _ => return Err(unexpected()),
    };
    Ok((cursor, keys))
}

/// HGETALL of every key, in one pipeline.
async fn fetch_hashes(node: &Client, keys: Vec<Vec<u8>>) -> Result<Vec<ScannedHash>, Error> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let pipeline = node.pipeline();
    for key in &keys {
        pipeline.hgetall::<(), _>(key.as_slice()).await?;
    }
    let replies = pipeline.try_all::<Value>().await;
    keys.into_iter()
        .zip(replies)
        .map(|(key, reply)| {
            let contents = match reply {
                Ok(value) => HashContents::Fields(fields_of(value)?),
                Err(error) if is_wrong_type(&error) => HashContents::NotAHash,
                Err(error) => return Err(error),
            };
            Ok(ScannedHash { key, contents })
        })
        .collect()
}

/// HGETALL's reply (pairs, or a map) as (field, value) bytes.
fn fields_of(reply: Value) -> Result<Fields, Error> {
    if reply.is_null() {
        return Ok(Vec::new());
    }
    let map = reply.into_map()?;
    Ok(map
        .inner()
        .into_iter()
        // A value that is not text stays, empty: no count, so it is
        // reported as unreadable rather than silently dropped.
        .map(|(field, value)| {
            (
                field.as_bytes().to_vec(),
                bytes_of(value).unwrap_or_default(),
            )
        })
        .collect())
}

fn bytes_of(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::Bytes(bytes) => Some(bytes.to_vec()),
        Value::String(text) => Some(text.as_bytes().to_vec()),
        Value::Integer(number) => Some(number.to_string().into_bytes()),
        _ => None,
    }
}

fn is_wrong_type(error: &Error) -> bool {
    *error.kind() == ErrorKind::InvalidArgument && error.details().starts_with("WRONGTYPE")
}
