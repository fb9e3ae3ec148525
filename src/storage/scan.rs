//! Reading every customer hash at once, for `sticky-routing export`: SCAN
//! (never KEYS, which blocks Redis for the whole keyspace) on every primary,
//! and the hashes each page names, fetched in one pipeline per page.
//!
//! This is the one bulk read in the crate, and it runs in a command-line
//! process, not in the server, so it uses fred's own clients rather than
//! the store's per-primary pools: a failover during an export ends it (exit
//! 2, run it again), which is what an operator expects of a one-off dump.
//!
//! A SCAN cursor means something only to the process that gave it: asked of
//! a restarted Redis (empty, or reloaded in another order) it ends the scan
//! early or skips keys, and the scan would look complete. So any reconnect
//! after the scan began ends it ([`ScanError::Interrupted`]), whether fred
//! replayed the page's commands on the new connection or not, and so does a
//! primary whose `run_id` (INFO server) at the end is not the one it had at
//! the start (a proxy or a failover can put another process behind a
//! connection that never dropped).
//!
//! On Cluster every primary is scanned at once, each on its own connection
//! (fred's `split_cluster`), so a page's keys are all on the node that
//! fetches them. On one node, and behind Sentinel, the one primary is.
//! Within a node the next SCAN page is asked for while the current page's
//! hashes are fetched, so the two round trips overlap.

use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, EventInterface, HashesInterface};
use fred::prelude::{Error, ErrorKind, Server, Value};
use fred::types::{ClusterHash, CustomCommand, InfoKind};
use tokio::sync::{broadcast, mpsc};

mod experiment_log;

use super::error::ConnectError;
use super::settings::RedisSettings;
use super::topology::scan_client;

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
    /// The scan cannot go on: its cursor belongs to a connection or a
    /// process that is gone, so keys could be missing.
    #[error(
        "redis was reconnected or restarted during the read ({0}): a SCAN cursor means \
         nothing to another process, so keys could be missing; run the export again"
    )]
    Interrupted(String),
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
    /// The clients that scan (each primary's own on Cluster, else
    /// `client`), each with the `run_id` its server had when connected.
    nodes: Vec<(Client, String)>,
    /// How long one page may take: its hashes and the next page's keys.
    page_within: Duration,
}

impl HashScanner {
    /// Connects with `redis` (URL, user, password, TLS files): to the
    /// node, the Sentinel-named primary, or every primary of a Cluster, all
    /// within `start_within`. Each page of the scan is then read within
    /// `redis.command_timeout`.
    pub async fn connect(redis: &RedisSettings, start_within: Duration) -> Result<Self, ScanError> {
        let client = scan_client(redis)?;
        let connected = async {
            let mut nodes = Vec::new();
            for node in connect_all(&client).await? {
                let run_id = run_id(&node)
                    .await
                    .map_err(|e| ScanError::Connect(e.to_string()))?;
                nodes.push((node, run_id));
            }
            Ok::<_, ScanError>(nodes)
        };
        let nodes = match tokio::time::timeout(start_within, connected).await {
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
    /// error; dropping the receiver stops the reads. A reconnect or another
    /// `run_id` on any primary is an error ([`ScanError::Interrupted`]).
    pub fn scan(&self, pattern: &str) -> mpsc::Receiver<Result<Vec<ScannedHash>, ScanError>> {
        let (pages, receiver) = mpsc::channel(PAGES_AHEAD * self.nodes.len());
        for (node, run_id) in &self.nodes {
            let scan = scan_node(
                Watched::new(node.clone(), run_id.clone()),
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
        for (node, _) in &self.nodes {
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

/// One primary's client, watched for anything that voids a SCAN cursor.
struct Watched {
    node: Client,
    /// The server's `run_id` when the scanner connected.
    run_id: String,
    /// fred's reconnection events, subscribed before the first SCAN. fred
    /// 10.1 broadcasts one each time it (re)connects, before it replays the
    /// commands the drop caught (router/centralized.rs,
    /// `initialize_connection`), so a page answered on a new connection is
    /// always preceded by an event here.
    reconnects: broadcast::Receiver<Server>,
}

impl Watched {
    fn new(node: Client, run_id: String) -> Self {
        let reconnects = node.reconnect_rx();
        Self {
            node,
            run_id,
            reconnects,
        }
    }

    /// Why the cursor can no longer be trusted, if it cannot.
    fn reconnected(&mut self) -> Option<ScanError> {
        use broadcast::error::TryRecvError;
        match self.reconnects.try_recv() {
            Ok(server) => Some(format!("the connection to {server} was made again")),
            Err(TryRecvError::Lagged(_)) => Some("the connection was made again".to_owned()),
            // Closed: the client is gone, and its next command fails anyway.
            Err(TryRecvError::Empty | TryRecvError::Closed) => None,
        }
        .map(ScanError::Interrupted)
    }

    /// At the end of the scan: a reconnect, or another process behind the
    /// same connection.
    async fn still_the_same(&mut self, page_within: Duration) -> Result<(), ScanError> {
        let now = tokio::time::timeout(page_within, run_id(&self.node))
            .await
            .map_err(|_| ScanError::Read(format!("no answer within {page_within:?}")))?
            .map_err(|e| ScanError::Read(e.to_string()))?;
        if let Some(error) = self.reconnected() {
            return Err(error);
        }
        if now != self.run_id {
            return Err(ScanError::Interrupted(format!(
                "the server's run_id was {} at the start and is {now} now",
                self.run_id
            )));
        }
        Ok(())
    }
}

/// Scans one primary to its end, sending each page's hashes to `pages`.
/// Each step (the first page's keys; then a page's hashes together with
/// the next page's keys, asked for at once) must end within `page_within`
/// of its start: one deadline for the step's two calls, whatever each of
/// them meets inside fred (a retry after a dropped connection, a queue
/// while it reconnects), so a dead or frozen Redis ends the scan then.
/// After each step, a reconnect ends the scan before the step's hashes are
/// sent; after the last, so does another `run_id`.
async fn scan_node(
    mut watched: Watched,
    pattern: String,
    page_within: Duration,
    pages: mpsc::Sender<Result<Vec<ScannedHash>, ScanError>>,
) {
    let node = watched.node.clone();
    let read = |error: Error| ScanError::Read(error.to_string());
    let late = || ScanError::Read(format!("no answer within {page_within:?}"));
    let mut page = tokio::time::timeout(page_within, scan_page(&node, "0".into(), &pattern))
        .await
        .map_or_else(|_| Err(late()), |page| page.map_err(read));
    loop {
        let (cursor, keys) = match page.and_then(|page| watched.reconnected().map_or(Ok(page), Err))
        {
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
        let hashes = match (hashes, watched.reconnected()) {
            (Ok(_), Some(error)) => Err(error),
            (hashes, _) => hashes,
        };
        let hashes = match (hashes, &next) {
            (Ok(hashes), None) => watched.still_the_same(page_within).await.map(|()| hashes),
            (hashes, _) => hashes,
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

/// The `run_id` in the node's `INFO server`: which process answers.
async fn run_id(node: &Client) -> Result<String, Error> {
    let info: String = node.info(Some(InfoKind::Server)).await?;
    run_id_in(&info)
        .map(str::to_owned)
        .ok_or_else(|| Error::new(ErrorKind::Protocol, "INFO server names no run_id"))
}

fn run_id_in(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(str::trim)
        .filter(|id| !id.is_empty())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_id_is_read_from_info_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:8f2c0e\r\ntcp_port:6379\r\n";
        assert_eq!(run_id_in(info), Some("8f2c0e"));
        assert_eq!(run_id_in("# Server\r\nrun_id:\r\n"), None);
        assert_eq!(run_id_in("redis_version:7.0.15"), None);
    }
}
