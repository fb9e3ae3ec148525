//! A local Redis Cluster: 3 primaries and 3 replicas from Debian's
//! redis-server on free loopback ports, made the way operators make one,
//! with `redis-cli --cluster create … --cluster-replicas 1`.
//!
//! The node timeout is 1 s so that a killed primary's replica takes over
//! within a few seconds, and every replica may be promoted however long it
//! was disconnected (`cluster-replica-validity-factor 0`): the failover
//! tests measure the service, not Redis's election rules.

use std::time::{Duration, Instant};

use crate::redis_server::{RedisServer, ServerOptions, redis_cli};

pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// nodes.conf files live here until the cluster is dropped.
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<RedisServer> = (0..6)
            .map(|i| {
                let config = dir.path().join(format!("nodes-{i}.conf"));
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
                        "--repl-diskless-sync-delay",
                        "0",
                    ]
                    .map(str::to_owned)
                    .to_vec(),
                    cluster_bus: true,
                    ..ServerOptions::default()
                })
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let output = std::process::Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli must be on PATH");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = Self { nodes, _dir: dir };
        cluster.wait_until_healthy(Duration::from_secs(20));
        cluster
    }

    /// A seed URL naming every node, as an operator would configure it.
    pub fn url(&self) -> String {
        let (first, rest) = self.nodes.split_first().unwrap();
        let others: Vec<String> = rest
            .iter()
            .map(|n| format!("node=127.0.0.1:{}", n.port))
            .collect();
        format!(
            "redis-cluster://127.0.0.1:{}?{}",
            first.port,
            others.join("&")
        )
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
        let deadline = Instant::now() + within;
        loop {
            let healthy = self.running().all(|port| {
                let ok = redis_cli(port, &["cluster", "info"]).contains("cluster_state:ok");
                let replication = redis_cli(port, &["info", "replication"]);
                ok && (replication.contains("role:master")
                    || replication.contains("master_link_status:up"))
            });
            if healthy {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster never became healthy"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `master` or `slave`, from ROLE.
pub fn role(port: u16) -> String {
    redis_cli(port, &["role"])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}
