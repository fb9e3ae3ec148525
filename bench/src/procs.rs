//! The processes a comparison runs: its own redis-server, the service and
//! the no-op floor, each killed when its handle drops, and their resident
//! memory read from `/proc`.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use test_support::redis_server::throwaway_args;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::BoxError;
use crate::redis_info::RedisProbe;

/// The gRPC health service name of the service's API, whose status says
/// whether Redis answers the request path.
pub const API_SERVICE: &str = "sticky_routing.v1.StickyRouting";

/// A child process, killed on drop.
pub struct Proc {
    pub child: Child,
    pub addr: SocketAddr,
    /// The service's `/metrics` listener; `None` for the other processes.
    pub metrics_addr: Option<SocketAddr>,
}

impl Proc {
    /// Peak and current resident set size in bytes (`VmHWM`, `VmRSS`).
    pub fn rss(&self) -> Option<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()?)).ok()?;
        let kib = |name: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.starts_with(name))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        };
        Some((kib("VmHWM:")? * 1024, kib("VmRSS:")? * 1024))
    }
}

/// A free loopback port (released at once; the race is harmless here).
pub fn free_addr() -> Result<SocketAddr, BoxError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// A sibling binary of the running one (`target/release/…`).
pub fn sibling(name: &str) -> Result<PathBuf, BoxError> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().ok_or("the executable has no directory")?;
    let path = dir.join(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found: `make bench` builds the service and the bench kit",
            path.display()
        )
        .into())
    }
}

/// `program`, run on the CPUs in `cpus` (a `taskset` list such as `0` or
/// `0-1`) when given. taskset execs the program, so the child's pid is the
/// program's own.
fn command(program: impl AsRef<std::ffi::OsStr>, cpus: Option<&str>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut command = Command::new("taskset");
            command.args(["-c", cpus]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// Starts `redis-server` on a free port, without persistence, logging into
/// `dir`, and waits until it answers.
pub async fn start_redis(redis_server: &str, dir: &Path) -> Result<Proc, BoxError> {
    start_redis_on(redis_server, dir, None).await
}

/// [`start_redis`], on the CPUs in `cpus` when given.
pub async fn start_redis_on(
    redis_server: &str,
    dir: &Path,
    cpus: Option<&str>,
) -> Result<Proc, BoxError> {
    let addr = free_addr()?;
    let child = command(redis_server, cpus)
        .args(["--port", &addr.port().to_string()])
        .args(throwaway_args(dir))
        .args(["--daemonize", "no"])
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {redis_server}: {e}"))?;
    let url = format!("redis://{addr}");
    let started = Instant::now();
    loop {
        if let Ok(probe) = RedisProbe::connect(&url).await {
            probe.quit().await;
            return Ok(Proc {
                child,
                addr,
                metrics_addr: None,
            });
        }
        if started.elapsed() > Duration::from_secs(10) {
            return Err(format!("redis-server did not answer on {addr}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts the service against `redis_url` with `extra_env`, logging into
/// `dir`, and waits until its API health is SERVING.
pub async fn start_service(
    binary: Option<&Path>,
    redis_url: &str,
    extra_env: &[(String, String)],
    dir: &Path,
) -> Result<Proc, BoxError> {
    start_service_on(binary, redis_url, extra_env, dir, None).await
}

/// [`start_service`], on the CPUs in `cpus` when given.
pub async fn start_service_on(
    binary: Option<&Path>,
    redis_url: &str,
    extra_env: &[(String, String)],
    dir: &Path,
    cpus: Option<&str>,
) -> Result<Proc, BoxError> {
    let addr = free_addr()?;
    let log = std::fs::File::create(dir.join("service.log"))?;
    let binary = match binary {
        Some(path) => path.to_path_buf(),
        None => sibling("sticky-routing")?,
    };
    let metrics_addr = free_addr()?;
    let child = command(binary, cpus)
        .env("STICKY_ROUTING_LISTEN_ADDR", addr.to_string())
        .env("STICKY_ROUTING_METRICS_ADDR", metrics_addr.to_string())
        // No fixed port that a second run could collide on.
        .env("STICKY_ROUTING_HEALTH_LISTEN_ADDR", "off")
        .env("STICKY_ROUTING_REDIS_URL", redis_url)
        .env("RUST_LOG", "warn")
        .envs(extra_env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    wait_serving(addr, API_SERVICE).await?;
    Ok(Proc {
        child,
        addr,
        metrics_addr: Some(metrics_addr),
    })
}

/// Starts `sticky-noop` with the service's worker thread count and reads
/// its bound address.
pub async fn start_noop(worker_threads: usize) -> Result<Proc, BoxError> {
    let mut child = Command::new(sibling("sticky-noop")?)
        .arg(format!("--worker-threads={worker_threads}"))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).await?;
    let addr: SocketAddr = line.trim().parse()?;
    Ok(Proc {
        child,
        addr,
        metrics_addr: None,
    })
}

async fn wait_serving(addr: SocketAddr, service: &str) -> Result<(), BoxError> {
    let started = Instant::now();
    loop {
        if let Ok(channel) = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await
        {
            let reply = HealthClient::new(channel)
                .check(HealthCheckRequest {
                    service: service.to_owned(),
                })
                .await;
            if reply.is_ok_and(|r| r.get_ref().status == ServingStatus::Serving as i32) {
                return Ok(());
            }
        }
        if started.elapsed() > Duration::from_secs(15) {
            return Err(format!("{service} on {addr} is not SERVING after 15 s").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
