//! The test harness: a real `redis-server` per test on a free loopback port,
//! and the real service on port 0 against it.
//!
//! Every test owns its Redis, so tests run in parallel without sharing keys,
//! and a test may stop, freeze or restart its Redis.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fred::prelude::{Builder, Client, ClientLike, Config, KeysInterface};
use sticky_routing::config::Settings;
use sticky_routing::startup::{Application, StartupError};
use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;

/// A redis-server child process, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
}

impl RedisServer {
    pub fn start() -> Self {
        for _ in 0..20 {
            let port = free_port();
            if let Some(child) = spawn_redis(port) {
                return Self {
                    child: Some(child),
                    port,
                };
            }
        }
        panic!("could not start redis-server on a free port (is redis-server installed?)");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (its data is gone: it keeps nothing on disk).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh, empty server on the same port.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = spawn_redis(self.port) {
                self.child = Some(child);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("could not restart redis-server on port {}", self.port);
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the server: it keeps its
    /// connections but answers nothing, like a Redis stuck on a slow command.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("redis is running").id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.signal("-CONT");
        }
        self.stop();
    }
}

fn spawn_redis(port: u16) -> Option<Child> {
    let mut child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be on PATH (apt-get install redis-server)");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return None; // port taken: let the caller pick another
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(child);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The commands the service sends; everything else Redis counts ran inside
/// a script or came from the test.
const CLIENT_COMMANDS: &[&str] = &["eval", "evalsha", "hgetall", "ttl", "del", "script"];

/// A running service and everything a test needs to talk to it.
pub struct TestApp {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub api: StickyRoutingClient<Channel>,
    pub health: HealthClient<Channel>,
    pub redis: RedisServer,
    /// A direct Redis connection, to inspect and arrange state.
    pub inspect: Client,
    pub settings: Settings,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<Result<(), StartupError>>>,
}

/// Settings for a test: loopback on port 0 and a small pool.
pub fn test_settings(redis: &RedisServer) -> Settings {
    let mut settings = Settings::defaults();
    settings.listen_addr = "127.0.0.1:0".parse().unwrap();
    settings.metrics_addr = "127.0.0.1:0".parse().unwrap();
    settings.redis.url = redis.url();
    settings.redis.pool_size = 2;
    settings
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

pub async fn spawn_app_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    configure(&mut settings);
    let app = Application::build(settings.clone())
        .await
        .expect("the app builds");
    let addr = app.grpc_addr();
    let metrics_addr = app.metrics_addr();
    let (tx, rx) = oneshot::channel();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = rx.await;
    }));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let inspect = Builder::from_config(Config::from_url(&redis.url()).unwrap())
        .build()
        .unwrap();
    inspect.init().await.unwrap();
    let mut app = TestApp {
        addr,
        metrics_addr,
        api: StickyRoutingClient::new(channel.clone()),
        health: HealthClient::new(channel),
        redis,
        inspect,
        settings,
        shutdown: Some(tx),
        server: Some(server),
    };
    app.wait_until_ready(true).await;
    app
}

impl TestApp {
    /// Waits until the API's health status is SERVING (or not).
    pub async fn wait_until_ready(&mut self, serving: bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = self.health_status("sticky_routing.v1.StickyRouting").await;
            if (status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32)
                == serving
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "health never became serving={serving}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn health_status(&mut self, service: &str) -> i32 {
        let request = tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        };
        self.health
            .check(request)
            .await
            .map_or(-1, |r| r.into_inner().status)
    }

    /// Stops the service and waits for its drain to finish.
    pub async fn stop(&mut self) -> Result<(), StartupError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.server.take() {
            Some(server) => server.await.expect("the server task does not panic"),
            None => Ok(()),
        }
    }

    pub async fn record(
        &self,
        req: pb::RecordOutcomeRequest,
    ) -> Result<pb::RecordOutcomeResponse, tonic::Status> {
        self.api
            .clone()
            .record_outcome(req)
            .await
            .map(tonic::Response::into_inner)
    }

    pub async fn pin(&self, req: pb::GetPinRequest) -> Result<pb::GetPinResponse, tonic::Status> {
        self.api
            .clone()
            .get_pin(req)
            .await
            .map(tonic::Response::into_inner)
    }

    /// A success for `customer` of merchant `m1` with INTERAC/RTP.
    pub async fn success(&self, customer: &str, connector: &str) -> pb::RecordOutcomeResponse {
        self.record(outcome("m1", customer, connector, pb::Outcome::Success))
            .await
            .unwrap()
    }

    /// A gateway failure for `customer` of merchant `m1` with INTERAC/RTP.
    pub async fn failure(&self, customer: &str, connector: &str) -> pb::RecordOutcomeResponse {
        self.record(outcome(
            "m1",
            customer,
            connector,
            pb::Outcome::GatewayFailure,
        ))
        .await
        .unwrap()
    }

    /// Every key in this test's Redis.
    pub async fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .inspect
            .custom(fred::cmd!("KEYS"), vec!["*"])
            .await
            .unwrap();
        keys.sort();
        keys
    }

    /// Calls per command from `INFO commandstats`, for the commands a client
    /// of Redis sends this service uses (commands run inside scripts are
    /// counted by Redis too, and health checks and inspection are noise).
    pub async fn command_calls(&self) -> std::collections::BTreeMap<String, u64> {
        let info: String = self
            .inspect
            .custom(fred::cmd!("INFO"), vec!["commandstats"])
            .await
            .unwrap();
        info.lines()
            .filter_map(|line| {
                let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = stats
                    .strip_prefix("calls=")?
                    .split(',')
                    .next()?
                    .parse()
                    .ok()?;
                CLIENT_COMMANDS
                    .contains(&name)
                    .then(|| (name.to_owned(), calls))
            })
            .collect()
    }

    /// The commands Redis ran between two `command_calls` snapshots.
    pub async fn commands_since(
        &self,
        before: &std::collections::BTreeMap<String, u64>,
    ) -> Vec<(String, u64)> {
        let after = self.command_calls().await;
        after
            .into_iter()
            .filter_map(|(name, calls)| {
                let delta = calls - before.get(&name).copied().unwrap_or(0);
                (delta > 0).then_some((name, delta))
            })
            .collect()
    }

    /// The customer hashes (`sticky_gw_*`) in this test's Redis.
    pub async fn customer_keys(&self) -> Vec<String> {
        let mut keys = self.keys().await;
        keys.retain(|k| k.starts_with("sticky_gw_"));
        keys
    }

    pub async fn ttl(&self, key: &str) -> i64 {
        self.inspect.ttl(key).await.unwrap()
    }

    /// Asserts the invariant: no key without a TTL.
    pub async fn assert_every_key_has_a_ttl(&self) {
        for key in self.keys().await {
            let ttl: i64 = self.inspect.pttl(&key).await.unwrap();
            assert!(ttl > 0, "{key} has no TTL ({ttl})");
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

pub fn outcome(
    merchant: &str,
    customer: &str,
    connector: &str,
    outcome: pb::Outcome,
) -> pb::RecordOutcomeRequest {
    pb::RecordOutcomeRequest {
        merchant_id: merchant.into(),
        customer_id: customer.into(),
        payment_method: "interac".into(),
        payment_method_type: "rtp".into(),
        connector: connector.into(),
        outcome: outcome.into(),
    }
}

pub fn pin_request(customer: &str, eligible: &[&str]) -> pb::GetPinRequest {
    pb::GetPinRequest {
        merchant_id: "m1".into(),
        customer_id: customer.into(),
        payment_method: "interac".into(),
        payment_method_type: "rtp".into(),
        eligible_connectors: eligible.iter().map(|c| c.to_string()).collect(),
    }
}

/// The (connector, count) pairs of a pin answer, best first.
pub fn ranked(pin: &pb::GetPinResponse) -> Vec<(&str, i64)> {
    pin.candidates
        .iter()
        .map(|c| (c.connector.as_str(), c.net_count))
        .collect()
}

pub const APPLIED: i32 = pb::RecordResult::Applied as i32;
pub const IGNORED_NO_HABIT: i32 = pb::RecordResult::IgnoredNoHabit as i32;
pub const NOT_ADMITTED: i32 = pb::RecordResult::NotAdmitted as i32;
