//! A local Redis Cluster: 3 primaries and 3 replicas from Debian's
//! redis-server on free loopback ports, made the way operators make one,
//! with `redis-cli --cluster create … --cluster-replicas 1`.
//!
//! The node timeout is 1 s so that a killed primary's replica takes over
//! within a few seconds, and every replica may be promoted however long it
//! was disconnected (`cluster-replica-validity-factor 0`): the failover
//! tests measure the service, not Redis's election rules. Every node runs
//! with `cluster-require-full-coverage no`, as docs/operations.md tells operators
//! to: with the default `yes`, Redis itself refuses every shard (CLUSTERDOWN)
//! from the moment a primary is marked failed until its replica is promoted,
//! and no client can keep the healthy shards serving.

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::redis_server::{RedisServer, ServerOptions, cli_binary, redis_cli};
use crate::wait::wait_for;

/// The longest `redis-cli --cluster create` may take.
const CREATE_WITHIN: Duration = Duration::from_secs(60);

pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// With TLS: each node's TLS port, in `nodes` order. The plain ports stay
    /// open for the harness's redis-cli; the service gets only TLS ports
    /// (CLUSTER SLOTS over TLS announces them, with `tls-cluster yes`).
    tls_ports: Vec<u16>,
    /// nodes.conf files live here until the cluster is dropped.
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    pub fn start() -> Self {
        Self::start_with_tls(None)
    }

    /// A cluster whose nodes also serve TLS, on a port of their own, with
    /// `tls_args` (certificate files); the bus and replication use TLS too.
    pub fn start_with_tls(tls_args: Option<Vec<String>>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut tls_ports = Vec::new();
        let nodes: Vec<RedisServer> = (0..6)
            .map(|i| {
                let config = dir.path().join(format!("nodes-{i}.conf"));
                let mut tls = Vec::new();
                if let Some(args) = &tls_args {
                    let port = crate::redis_server::free_port();
                    tls_ports.push(port);
                    tls.extend(args.iter().cloned());
                    tls.extend(
                        ["--tls-port", &port.to_string(), "--tls-cluster", "yes"]
                            .map(str::to_owned),
                    );
                    tls.extend(["--tls-replication", "yes"].map(str::to_owned));
                }
                RedisServer::start_with(ServerOptions {
                    args: [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        config.to_str().unwrap(),
                        "--cluster-node-timeout",
                        "1000",
                        "--cluster-replica-validity-factor",
                        "0",
                        "--cluster-require-full-coverage",
                        "no",
                        "--repl-diskless-sync-delay",
                        "0",
                    ]
                    .map(str::to_owned)
                    .into_iter()
                    .chain(tls)
                    .collect(),
                    cluster_bus: true,
                    ..ServerOptions::default()
                })
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let cli = cli_binary();
        let mut create = std::process::Command::new(&cli)
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{cli} must be on PATH: {e}"));
        // redis-cli waits for the nodes to agree with no bound of its own:
        // on a starved machine it once waited 23 minutes. A test fails
        // instead, well inside CI's time.
        let deadline = std::time::Instant::now() + CREATE_WITHIN;
        let status = loop {
            if let Some(status) = create.try_wait().expect("redis-cli runs") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = create.kill();
                let _ = create.wait();
                panic!("{cli} --cluster create did not finish within {CREATE_WITHIN:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stdout = String::new();
        if let Some(mut out) = create.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut out, &mut stdout);
        }
        assert!(status.success(), "{cli} --cluster create failed: {stdout}");
        let cluster = Self {
            nodes,
            tls_ports,
            _dir: dir,
        };
        cluster.wait_until_healthy(Duration::from_secs(20));
        cluster
    }

    /// A seed URL naming every node, as an operator would configure it
    /// (`rediss-cluster://` and the TLS ports for a TLS cluster).
    pub fn url(&self) -> String {
        let (scheme, ports): (&str, Vec<u16>) = if self.tls_ports.is_empty() {
            ("redis-cluster", self.nodes.iter().map(|n| n.port).collect())
        } else {
            ("rediss-cluster", self.tls_ports.clone())
        };
        let (first, rest) = ports.split_first().unwrap();
        let others: Vec<String> = rest
            .iter()
            .map(|port| format!("node=127.0.0.1:{port}"))
            .collect();
        format!("{scheme}://127.0.0.1:{first}?{}", others.join("&"))
    }

    /// The running nodes that are primaries now.
    pub fn primaries(&self) -> Vec<u16> {
        self.running()
            .filter(|port| role(*port) == "master")
            .collect()
    }

    /// Ports of the nodes still running.
    pub fn running(&self) -> impl Iterator<Item = u16> + '_ {
        self.nodes.iter().filter(|n| n.is_running()).map(|n| n.port)
    }

    /// The port of the replica that serves `primary`'s slots.
    pub fn replica_of(&self, primary: u16) -> u16 {
        let id = redis_cli(primary, &["cluster", "myid"]).trim().to_owned();
        self.running()
            .find(|port| {
                redis_cli(*port, &["cluster", "nodes"])
                    .lines()
                    .any(|line| line.contains("myself,slave") && line.contains(&id))
            })
            .unwrap_or_else(|| panic!("no replica follows {primary}"))
    }

    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes.iter_mut().find(|n| n.port == port).unwrap()
    }

    /// Waits until every running node says `cluster_state:ok` and every
    /// replica's link to its primary is up (so it can take over).
    pub fn wait_until_healthy(&self, within: Duration) {
        let every = Duration::from_millis(50);
        wait_for(within, every, "the cluster never became healthy", || {
            self.running()
                .all(|port| {
                    let ok = redis_cli(port, &["cluster", "info"]).contains("cluster_state:ok");
                    let replication = redis_cli(port, &["info", "replication"]);
                    ok && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
                })
                .then_some(())
        });
    }
}

/// The slots `port` serves, from its own CLUSTER NODES line.
pub fn owned_slots(port: u16) -> Vec<RangeInclusive<u16>> {
    let nodes = redis_cli(port, &["cluster", "nodes"]);
    let line = nodes.lines().find(|l| l.contains("myself")).unwrap();
    line.split_whitespace()
        .skip(8)
        .filter(|field| !field.starts_with('['))
        .map(|field| match field.split_once('-') {
            Some((a, b)) => a.parse().unwrap()..=b.parse().unwrap(),
            None => {
                let slot = field.parse().unwrap();
                slot..=slot
            }
        })
        .collect()
}

/// `master` or `slave`, from ROLE.
pub fn role(port: u16) -> String {
    redis_cli(port, &["role"])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}
