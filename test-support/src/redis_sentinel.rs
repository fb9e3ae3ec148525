//! A primary, two replicas and one Sentinel watching them, from Debian's
//! redis-server (`--sentinel` mode; the sentinel needs a writable config
//! file, so it lives in a temporary folder). Two replicas, because after a
//! failover the new primary must still have one for WAIT to confirm.
//!
//! One sentinel with quorum 1 is enough to test the service: `SENTINEL
//! FAILOVER` needs no agreement, and the service's side (asking Sentinel for
//! the primary and following a switch) is the same with three.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::redis_cluster::role;
use crate::redis_server::{
    RedisServer, SERVICE_PASSWORD, SERVICE_USER, ServerOptions, free_port, redis_cli, server_binary,
};
use crate::wait::wait_until;

/// The name Sentinel monitors the primary under.
pub const SERVICE_NAME: &str = "sticky";

pub struct RedisSentinel {
    pub primary: RedisServer,
    pub replicas: Vec<RedisServer>,
    sentinel: Child,
    pub sentinel_port: u16,
    _dir: tempfile::TempDir,
}

impl RedisSentinel {
    pub fn start() -> Self {
        let primary = RedisServer::start();
        let replicas: Vec<RedisServer> = (0..2)
            .map(|_| {
                RedisServer::start_with(ServerOptions {
                    args: vec![
                        "--replicaof".into(),
                        "127.0.0.1".into(),
                        primary.port.to_string(),
                    ],
                    ..ServerOptions::default()
                })
            })
            .collect();
        for replica in &replicas {
            wait_until(Duration::from_secs(15), "a replica never synced", || {
                redis_cli(replica.port, &["info", "replication"]).contains("master_link_status:up")
            });
        }
        let dir = tempfile::tempdir().unwrap();
        let sentinel_port = free_port();
        let config = dir.path().join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {sentinel_port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {SERVICE_NAME} 127.0.0.1 {primary} 1\n\
                 sentinel down-after-milliseconds {SERVICE_NAME} 1000\n\
                 sentinel failover-timeout {SERVICE_NAME} 5000\n\
                 user {SERVICE_USER} on >{SERVICE_PASSWORD} {rules}\n",
                dir = dir.path().display(),
                primary = primary.port,
                rules = sentinel_acl_rules(),
            ),
        )
        .unwrap();
        let server = server_binary();
        let sentinel = Command::new(&server)
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{server} must be on PATH: {e}"));
        let set = Self {
            primary,
            replicas,
            sentinel,
            sentinel_port,
            _dir: dir,
        };
        wait_until(
            Duration::from_secs(20),
            "sentinel never found the replicas",
            || {
                let known = redis_cli(sentinel_port, &["sentinel", "replicas", SERVICE_NAME]);
                set.replicas
                    .iter()
                    .all(|r| known.contains(&r.port.to_string()))
            },
        );
        set
    }

    /// The URL an operator gives the service: the sentinel, the name, and
    /// the service's sentinel user (the data nodes' user comes from the
    /// settings, as everywhere in the tests).
    pub fn url(&self) -> String {
        format!(
            "redis-sentinel://127.0.0.1:{}?sentinelServiceName={SERVICE_NAME}\
             &sentinelUsername={SERVICE_USER}&sentinelPassword={SERVICE_PASSWORD}",
            self.sentinel_port
        )
    }

    /// How many connections the service's user holds to the sentinel.
    pub fn service_clients(&self) -> usize {
        redis_cli(self.sentinel_port, &["client", "list"])
            .lines()
            .filter(|line| line.contains(&format!(" user={SERVICE_USER} ")))
            .count()
    }

    /// What the sentinel refused its users (ACL LOG); empty when nothing.
    pub fn acl_denials(&self) -> String {
        redis_cli(self.sentinel_port, &["acl", "log"])
    }

    /// The server that is primary now.
    pub fn current_primary(&self) -> u16 {
        self.ports()
            .find(|port| role(*port) == "master")
            .expect("one server is primary")
    }

    pub fn ports(&self) -> impl Iterator<Item = u16> + '_ {
        std::iter::once(self.primary.port).chain(self.replicas.iter().map(|r| r.port))
    }

    /// Asks Sentinel to fail over now.
    pub fn failover(&self) {
        let reply = redis_cli(self.sentinel_port, &["sentinel", "failover", SERVICE_NAME]);
        assert!(reply.contains("OK"), "SENTINEL FAILOVER said {reply}");
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        let _ = self.sentinel.kill();
        let _ = self.sentinel.wait();
    }
}

/// The sentinel user's rules docs/operations.md documents (deploy/sentinel-acl.txt).
fn sentinel_acl_rules() -> String {
    include_str!("../../deploy/sentinel-acl.txt")
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ")
}
