//! The app harness: a real Redis per test (one `redis-server`, or a
//! 3-primary Cluster), and the real service on port 0 against it, logged in
//! as the least-privilege user of `deploy/redis-acl.txt`.
//!
//! Every test owns its Redis, so tests run in parallel without sharing keys,
//! and a test may stop, freeze or restart its Redis. The rule tests take a
//! [`Topology`] and run on both, so every rule is proven on a single node and
//! on Cluster.

pub mod bulk;
pub mod export_rows;
pub mod frames;
pub mod held_calls;
pub mod load;
pub mod peer;
pub mod race;
pub mod replay;
pub mod replay_model;
pub mod tls;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fred::prelude::{Builder, Client, ClientLike, Config, KeysInterface};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sticky_routing::config::Settings;
use sticky_routing::startup::{Application, StartupError};
use sticky_routing::storage::Secret;
use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

pub use test_support::redis_cluster::RedisCluster;
pub use test_support::redis_sentinel::RedisSentinel;
pub use test_support::redis_server::{
    RedisServer, SERVICE_PASSWORD, SERVICE_USER, free_port, is_valkey, redis_cli,
};
pub use test_support::signal::send_to_child;
pub use test_support::wait::wait_for;

/// Where a test's Redis runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Single,
    Cluster,
    /// A primary and a replica behind one Sentinel.
    Sentinel,
}

/// A test's Redis: one server or a whole cluster.
pub enum TestRedis {
    Single(RedisServer),
    Cluster(RedisCluster),
    Sentinel(RedisSentinel),
}

impl TestRedis {
    pub fn start(topology: Topology) -> Self {
        match topology {
            Topology::Single => Self::Single(RedisServer::start()),
            Topology::Cluster => Self::Cluster(RedisCluster::start()),
            Topology::Sentinel => Self::Sentinel(RedisSentinel::start()),
        }
    }

    pub fn url(&self) -> String {
        match self {
            Self::Single(server) => server.url(),
            Self::Cluster(cluster) => cluster.url(),
            Self::Sentinel(sentinel) => sentinel.url(),
        }
    }

    /// The one server, for tests that stop, freeze or restart it.
    pub fn server(&mut self) -> &mut RedisServer {
        match self {
            Self::Single(server) => server,
            _ => panic!("this test needs a single-node Redis"),
        }
    }

    pub fn cluster(&mut self) -> &mut RedisCluster {
        match self {
            Self::Cluster(cluster) => cluster,
            _ => panic!("this test needs Redis Cluster"),
        }
    }

    pub fn sentinel(&self) -> &RedisSentinel {
        match self {
            Self::Sentinel(sentinel) => sentinel,
            _ => panic!("this test needs Redis Sentinel"),
        }
    }

    pub fn stop(&mut self) {
        self.server().stop();
    }

    pub fn restart(&mut self) {
        self.server().restart();
    }

    pub fn signal(&self, signal: &str) {
        match self {
            Self::Single(server) => server.signal(signal),
            _ => panic!("this test needs a single-node Redis"),
        }
    }

    /// The ports that hold the data now: the server, or the primaries.
    pub fn data_ports(&self) -> Vec<u16> {
        match self {
            Self::Single(server) => vec![server.port],
            Self::Cluster(cluster) => cluster.primaries(),
            Self::Sentinel(sentinel) => vec![sentinel.current_primary()],
        }
    }
}

/// The commands the service sends; everything else Redis counts ran inside
/// a script or came from the test.
const CLIENT_COMMANDS: &[&str] = &["eval", "evalsha", "hgetall", "ttl", "del", "script"];

/// A running service and everything a test needs to talk to it.
pub struct TestApp {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// The plaintext health listener, unless the test turned it off.
    pub health_addr: Option<SocketAddr>,
    pub api: StickyRoutingClient<Channel>,
    pub health: HealthClient<Channel>,
    pub redis: TestRedis,
    /// A direct Redis connection as `default`, to inspect and arrange state.
    /// On Cluster it routes keyed commands to their slot's primary.
    pub inspect: Client,
    pub settings: Settings,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<Result<(), StartupError>>>,
}

/// Settings for a test: loopback on port 0, a small pool, and the
/// service's own ACL user.
pub fn test_settings_for(url: String) -> Settings {
    let mut settings = Settings::defaults();
    settings.listen_addr = "127.0.0.1:0".parse().unwrap();
    settings.metrics_addr = "127.0.0.1:0".parse().unwrap();
    settings.health_listen_addr = Some("127.0.0.1:0".parse().unwrap());
    settings.redis.url = url.into();
    settings.redis.username = Some(SERVICE_USER.into());
    settings.redis.password = Some(Secret::new(SERVICE_PASSWORD));
    settings.redis.pool_size = 2;
    // Off unless a test turns it on (tests/api/breaker.rs): its background
    // flush and poll would add commands to the tests that count what one
    // call sends to Redis.
    settings.breaker = None;
    settings
}

pub fn test_settings(redis: &RedisServer) -> Settings {
    test_settings_for(redis.url())
}

pub async fn spawn_app() -> TestApp {
    spawn_app_on(Topology::Single, |_| {}).await
}

pub async fn spawn_app_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_on(Topology::Single, configure).await
}

pub async fn spawn_app_on(topology: Topology, configure: impl FnOnce(&mut Settings)) -> TestApp {
    let redis = TestRedis::start(topology);
    let url = redis.url();
    spawn_app_against(redis, url, configure).await
}

/// The service against `redis`, reached at `url` (which may be a proxy in
/// front of it); the test's inspection client talks to `redis` directly.
pub async fn spawn_app_against(
    redis: TestRedis,
    url: String,
    configure: impl FnOnce(&mut Settings),
) -> TestApp {
    let mut settings = test_settings_for(url);
    configure(&mut settings);
    let app = Application::build(settings.clone())
        .await
        .expect("the app builds");
    let addr = app.grpc_addr();
    let metrics_addr = app.metrics_addr();
    let health_addr = app.health_addr();
    let (tx, rx) = oneshot::channel();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = rx.await;
    }));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    // It follows failovers too, and never waits forever.
    let inspect = Builder::from_config(Config::from_url(&redis.url()).unwrap())
        .set_policy(fred::prelude::ReconnectPolicy::new_constant(0, 100))
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(10))
        .build()
        .unwrap();
    inspect.init().await.unwrap();
    let app = TestApp {
        addr,
        metrics_addr,
        health_addr,
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
    pub async fn wait_until_ready(&self, serving: bool) {
        wait_for_readiness(&self.health, serving).await;
    }

    pub async fn health_status(&self, service: &str) -> i32 {
        health_status(&self.health, service).await
    }

    /// The Prometheus text on `/metrics`, as a scraper gets it.
    pub async fn scrape(&self) -> String {
        scrape(self.metrics_addr).await
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

    /// What starts the drain when sent to, taken out of the app: the test
    /// can start it while it borrows the app, and [`Self::stop`] still
    /// waits for the drain to end.
    pub fn drain_trigger(&mut self) -> oneshot::Sender<()> {
        self.shutdown.take().expect("the drain has not started")
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

    /// GetHabits for `customer` of merchant `m1`.
    pub async fn habits(&self, customer: &str) -> pb::GetHabitsResponse {
        let req = pb::GetHabitsRequest {
            merchant_id: "m1".into(),
            customer_id: customer.into(),
        };
        self.api.clone().get_habits(req).await.unwrap().into_inner()
    }

    /// ForgetCustomer for `customer` of merchant `m1`.
    pub async fn forget(&self, customer: &str) -> pb::ForgetCustomerResponse {
        let req = pb::ForgetCustomerRequest {
            merchant_id: "m1".into(),
            customer_id: customer.into(),
        };
        self.api
            .clone()
            .forget_customer(req)
            .await
            .unwrap()
            .into_inner()
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

    /// A connection as `default` to one node, for per-node commands.
    pub async fn node(&self, port: u16) -> Client {
        let client =
            Builder::from_config(Config::from_url(&format!("redis://127.0.0.1:{port}")).unwrap())
                .build()
                .unwrap();
        client.init().await.unwrap();
        client
    }

    /// Runs a command on every node that holds data, one reply each.
    pub async fn on_every_primary<R: fred::types::FromValue>(
        &self,
        command: &str,
        args: Vec<&str>,
    ) -> Vec<R> {
        let mut replies = Vec::new();
        for port in self.redis.data_ports() {
            let node = self.node(port).await;
            let cmd = fred::types::CustomCommand::new(command.to_owned(), None::<u16>, false);
            replies.push(node.custom(cmd, args.clone()).await.unwrap());
            let _ = node.quit().await;
        }
        replies
    }

    /// Every key in this test's Redis (on Cluster, on every primary).
    pub async fn keys(&self) -> Vec<String> {
        let per_node: Vec<Vec<String>> = self.on_every_primary("KEYS", vec!["*"]).await;
        let mut keys: Vec<String> = per_node.into_iter().flatten().collect();
        keys.sort();
        keys
    }

    /// Makes every node forget its cached scripts, as a restart would.
    pub async fn flush_scripts(&self) {
        let _: Vec<String> = self.on_every_primary("SCRIPT", vec!["FLUSH"]).await;
    }

    /// Calls per command from `INFO commandstats`, for the commands a client
    /// of Redis sends this service uses (commands run inside scripts are
    /// counted by Redis too, and health checks and inspection are noise).
    pub async fn command_calls(&self) -> std::collections::BTreeMap<String, u64> {
        let infos: Vec<String> = self.on_every_primary("INFO", vec!["commandstats"]).await;
        let mut calls = std::collections::BTreeMap::new();
        for info in infos {
            for (name, count) in Self::client_commands(&info) {
                *calls.entry(name).or_default() += count;
            }
        }
        calls
    }

    /// The allow-listed commands' call counts in one `INFO commandstats`.
    fn client_commands(info: &str) -> Vec<(String, u64)> {
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

/// The Prometheus text on `/metrics` at `metrics_addr`, as a scraper gets it.
pub async fn scrape(metrics_addr: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(metrics_addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The value of `series` (name and labels, exactly as exposed) in a
/// Prometheus text exposition; `None` when no line has it. The whole series
/// must match and the value is compared as a number, so `… 2` does not
/// pass for `… 20`.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().unwrap())
        })
}

/// Every sample of the family `name` (a histogram's `_count`, say) in a
/// Prometheus text exposition: the labels between the braces, and the value.
pub fn samples<'a>(text: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    let prefix = format!("{name}{{");
    text.lines()
        .filter_map(|line| {
            let (series, value) = line.strip_prefix(&prefix)?.rsplit_once(' ')?;
            let labels = series.strip_suffix('}')?;
            Some((labels, value.parse().unwrap()))
        })
        .collect()
}

/// The variables that run the binary on free local ports against
/// `redis_url` as the test Redis's service user, and the gRPC address.
pub fn binary_on_free_ports(redis_url: String) -> (String, Vec<(&'static str, String)>) {
    let addr = format!("127.0.0.1:{}", free_port());
    let vars = vec![
        ("STICKY_ROUTING_LISTEN_ADDR", addr.clone()),
        (
            "STICKY_ROUTING_METRICS_ADDR",
            format!("127.0.0.1:{}", free_port()),
        ),
        ("STICKY_ROUTING_REDIS_URL", redis_url),
        ("STICKY_ROUTING_REDIS_USERNAME", SERVICE_USER.into()),
        ("STICKY_ROUTING_REDIS_PASSWORD", SERVICE_PASSWORD.into()),
        ("STICKY_ROUTING_REDIS_POOL_SIZE", "2".into()),
    ];
    (addr, vars)
}

/// The binary on free local ports against `redis_url`, with `extra`
/// variables and its stderr to `stderr`, and a channel to it once its gRPC
/// port accepts connections (not once it is ready: some tests point it at a
/// Redis that is down).
pub async fn start_binary_listening(
    redis_url: String,
    extra: &[(&str, String)],
    stderr: std::process::Stdio,
) -> (tokio::process::Child, Channel) {
    let (addr, mut vars) = binary_on_free_ports(redis_url);
    vars.extend_from_slice(extra);
    let child = service_binary(&vars)
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("the binary starts");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(channel) = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
        {
            return (child, channel);
        }
        assert!(Instant::now() < deadline, "the binary never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The service's binary with a clean `STICKY_ROUTING_*` and `OTEL_*` environment plus
/// `vars`; the child is killed if the test drops it (a failed assertion).
pub fn service_binary(vars: &[(&str, String)]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sticky-routing"));
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if name_text.starts_with("STICKY_ROUTING_") || name_text.starts_with("OTEL_") {
            command.env_remove(name);
        }
    }
    // Tests run in parallel: no fixed port for the health listener unless
    // the test names one.
    command.env("STICKY_ROUTING_HEALTH_LISTEN_ADDR", "127.0.0.1:0");
    command
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

/// Starts `command` with its stdin, stdout and stderr piped to the test.
pub fn spawn_piped(mut command: tokio::process::Command) -> tokio::process::Child {
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// A child's output, read as it comes so a full pipe never blocks it.
pub fn drain(
    output: Option<impl tokio::io::AsyncRead + Unpin + Send + 'static>,
) -> JoinHandle<String> {
    use tokio::io::AsyncReadExt;
    let mut output = output.unwrap();
    tokio::spawn(async move {
        let mut text = String::new();
        let _ = output.read_to_string(&mut text).await;
        text
    })
}

/// Waits (polling, up to `within`) until `probe` holds; `false` if the
/// `child` ended first or the time ran out.
pub async fn until_while_running(
    child: &mut tokio::process::Child,
    within: Duration,
    probe: impl Fn() -> bool,
) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if probe() {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// `customers` customer hashes of merchant `m1` in Redis on `port`, one
/// habit each, written by one script so that the fill takes well under a
/// second.
pub fn fill(port: u16, customers: u32) {
    let script = "for i = 1, tonumber(ARGV[1]) do \
                  redis.call('HSET', 'sticky_gw_m1_c' .. i, 'INTERAC:RTP:GIGADAT', '3') end";
    redis_cli(port, &["EVAL", script, "0", &customers.to_string()]);
    let held: u32 = redis_cli(port, &["DBSIZE"]).trim().parse().unwrap();
    assert_eq!(held, customers);
}

/// How a test's Redis fails under a bulk command (`import`, `export`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisFailure {
    /// The process is killed: its connections are closed.
    Killed,
    /// SIGSTOP: its connections stay open and nothing is answered.
    Frozen,
}

/// How soon after its Redis dies or freezes a bulk command must have exited:
/// the Redis timeout it runs with (the default: the tests set none) plus
/// 5 s, as docs/operations.md promises.
pub fn bulk_gives_up_within() -> Duration {
    Settings::defaults().redis.command_timeout + Duration::from_secs(5)
}

/// An API client over a plain HTTP/2 connection; see [`deadline_blind_api`].
pub type DeadlineBlindApi = StickyRoutingClient<HttpClient<HttpConnector, tonic::body::Body>>;

/// A client of the API that sends `grpc-timeout` as given but never enforces
/// it: tonic's `Channel` times every call from that header itself, so its
/// own expiry would hide whether the server honoured the deadline.
pub fn deadline_blind_api(addr: SocketAddr) -> DeadlineBlindApi {
    // As gRPC clients do: otherwise Nagle holds the body back ~40 ms.
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    let http2 = HttpClient::builder(TokioExecutor::new())
        .http2_only(true)
        .build(tcp);
    StickyRoutingClient::with_origin(http2, format!("http://{addr}").parse().unwrap())
}

/// `message` with a `grpc-timeout` of `deadline` (whole milliseconds), set
/// as metadata so that only the server enforces it (with
/// [`deadline_blind_api`]).
pub fn with_deadline<T>(message: T, deadline: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let header = format!("{}m", deadline.as_millis());
    request
        .metadata_mut()
        .insert("grpc-timeout", header.parse().unwrap());
    request
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
        ..Default::default()
    }
}

pub fn pin_request(customer: &str, eligible: &[&str]) -> pb::GetPinRequest {
    pb::GetPinRequest {
        merchant_id: "m1".into(),
        customer_id: customer.into(),
        payment_method: "interac".into(),
        payment_method_type: "rtp".into(),
        eligible_connectors: eligible.iter().map(|c| c.to_string()).collect(),
        ..Default::default()
    }
}

/// The (connector, count) pairs of a pin answer, best first.
pub fn ranked(pin: &pb::GetPinResponse) -> Vec<(&str, i64)> {
    pin.candidates
        .iter()
        .map(|c| (c.connector.as_str(), c.net_count))
        .collect()
}

/// The readiness service: SERVING only while Redis answers.
pub const API: &str = "sticky_routing.v1.StickyRouting";
pub const SERVING: i32 = ServingStatus::Serving as i32;
pub const NOT_SERVING: i32 = ServingStatus::NotServing as i32;

/// The status `health` reports for `service`; -1 when the call fails.
pub async fn health_status(health: &HealthClient<Channel>, service: &str) -> i32 {
    let request = tonic_health::pb::HealthCheckRequest {
        service: service.into(),
    };
    health
        .clone()
        .check(request)
        .await
        .map_or(-1, |r| r.into_inner().status)
}

/// Polls `probe` every 50 ms until it holds, and says how long that
/// took; panics after `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut probe: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if probe().await {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits up to 10 s until the API's readiness is SERVING (or not).
pub async fn wait_for_readiness(health: &HealthClient<Channel>, serving: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while (health_status(health, API).await == SERVING) != serving {
        assert!(
            Instant::now() < deadline,
            "health never became serving={serving}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub const APPLIED: i32 = pb::RecordResult::Applied as i32;
pub const IGNORED_NO_HABIT: i32 = pb::RecordResult::IgnoredNoHabit as i32;
pub const NOT_ADMITTED: i32 = pb::RecordResult::NotAdmitted as i32;
pub const DUPLICATE: i32 = pb::RecordResult::Duplicate as i32;
