//! One `redis-server` child process on a free loopback port, killed on drop.
//!
//! Every server has the service's least-privilege user with exactly the
//! rules in `deploy/redis-acl.txt`, and the service under test logs in as
//! that user: the whole suite proves the documented ACL is enough. The
//! export's read-only user has those of `deploy/redis-acl-export.txt`. The
//! `default` user keeps full rights for the tests' own inspection.
//!
//! Which server runs is chosen in one place, [`server_binary`]: Debian's
//! `redis-server` unless `STICKY_TEST_REDIS_SERVER` names another (CI's
//! Valkey pass sets `valkey-server`), so the same suite proves the service on
//! both. [`cli_binary`] follows it.

use std::ffi::OsString;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The service's Redis user in every test.
pub const SERVICE_USER: &str = "sticky-routing";
/// Its password; a test value, never a real one.
pub const SERVICE_PASSWORD: &str = "test-only-password";

/// `sticky-routing export`'s read-only Redis user in every test.
pub const EXPORT_USER: &str = "sticky-routing-export";
/// Its password; a test value, never a real one.
pub const EXPORT_PASSWORD: &str = "test-only-export-password";

/// The variable that names the server binary the harness starts.
pub const SERVER_ENV: &str = "STICKY_TEST_REDIS_SERVER";
/// The variable that names the CLI, when it is not the server's sibling.
pub const CLI_ENV: &str = "STICKY_TEST_REDIS_CLI";

/// The server binary every test starts (single node, cluster node and
/// sentinel alike): `$STICKY_TEST_REDIS_SERVER`, or `redis-server`.
pub fn server_binary() -> String {
    std::env::var(SERVER_ENV)
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "redis-server".to_owned())
}

/// The CLI the harness inspects servers and creates clusters with:
/// `$STICKY_TEST_REDIS_CLI`, or the server's sibling (`valkey-server` →
/// `valkey-cli`, `/opt/x/redis-server` → `/opt/x/redis-cli`). redis-cli
/// talks to Valkey too, but pairing them keeps a Valkey-only machine working.
pub fn cli_binary() -> String {
    if let Some(cli) = std::env::var(CLI_ENV).ok().filter(|c| !c.is_empty()) {
        return cli;
    }
    let server = server_binary();
    match server.strip_suffix("-server") {
        Some(stem) => format!("{stem}-cli"),
        None => "redis-cli".to_owned(),
    }
}

/// The ACL rules docs/operations.md documents, as redis-server arguments.
pub fn acl_rules() -> Vec<String> {
    rules_of(include_str!("../../deploy/redis-acl.txt"))
}

/// The export user's documented rules, as redis-server arguments.
pub fn export_acl_rules() -> Vec<String> {
    rules_of(include_str!("../../deploy/redis-acl-export.txt"))
}

fn rules_of(file: &str) -> Vec<String> {
    file.lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .map(str::to_owned)
        .collect()
}

/// How to run one server.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Extra redis-server arguments (cluster mode, TLS files).
    pub args: Vec<String>,
    /// Serve TLS on the port instead of plain TCP.
    pub tls: bool,
    /// Cluster mode: the bus port (port + 10000) must be free too.
    pub cluster_bus: bool,
}

/// A redis-server child process, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    options: ServerOptions,
    /// The server's working folder: a replica's full sync writes its RDB
    /// file there, never into the checkout.
    dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default())
    }

    pub fn start_with(options: ServerOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..20 {
            let port = if options.cluster_bus {
                free_port_with_bus()
            } else {
                free_port()
            };
            if let Some(child) = spawn_redis(port, &options, dir.path()) {
                return Self {
                    child: Some(child),
                    port,
                    options,
                    dir,
                };
            }
        }
        panic!(
            "could not start {} on a free port (is it installed?)",
            server_binary()
        );
    }

    pub fn url(&self) -> String {
        let scheme = if self.options.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
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
            if let Some(child) = spawn_redis(self.port, &self.options, self.dir.path()) {
                self.child = Some(child);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "could not restart {} on port {}",
            server_binary(),
            self.port
        );
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the server: it keeps its
    /// connections but answers nothing, like a Redis stuck on a slow command.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("redis is running").id();
        crate::signal::send(pid, signal);
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

/// Runs `redis-cli -p port args…` ([`cli_binary`]) and returns its output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let cli = cli_binary();
    let output = Command::new(&cli)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cli} must be on PATH (scripts/ensure-redis.sh): {e}"));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Whether the server on `port` is Valkey (`server_name:valkey` in INFO;
/// Valkey also answers `redis_version`, so that field cannot tell). For the
/// few tests whose set-up provokes a Redis-only behaviour.
pub fn is_valkey(port: u16) -> bool {
    redis_cli(port, &["info", "server"])
        .lines()
        .any(|line| line.trim_end() == "server_name:valkey")
}

/// The flags of a throwaway redis-server working in `dir`: loopback only,
/// nothing persisted (a test's or a measurement's data dies with it). The
/// caller adds the port. The bench kit starts its servers with these too;
/// the shell scripts' twin is `scripts/lib/local-redis.sh`.
pub fn throwaway_args(dir: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        .into_iter()
        .map(OsString::from)
        .collect();
    args.push("--dir".into());
    args.push(dir.into());
    args
}

fn spawn_redis(port: u16, options: &ServerOptions, dir: &Path) -> Option<Child> {
    let port_text = port.to_string();
    let listen: &[&str] = if options.tls {
        &["--port", "0", "--tls-port", &port_text]
    } else {
        &["--port", &port_text]
    };
    let user = [
        SERVICE_USER.to_owned(),
        "on".into(),
        format!(">{SERVICE_PASSWORD}"),
    ];
    let server = server_binary();
    let mut child = Command::new(&server)
        .args(listen)
        .args(throwaway_args(dir))
        .arg("--user")
        .args(user)
        .args(acl_rules())
        .args(["--user", EXPORT_USER, "on", &format!(">{EXPORT_PASSWORD}")])
        .args(export_acl_rules())
        .args(&options.args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{server} must be on PATH (scripts/ensure-redis.sh): {e}"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return None; // port taken: let the caller pick another
        }
        if answers_as(port, child.id(), options.tls) {
            return Some(child);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Whether the server on `port` is the child `pid`, and not another test's
/// server that took the port first (a plain connect cannot tell them apart).
/// A TLS port is only checked for a listener: the child is alive, and the
/// bind would have failed had the port been taken.
fn answers_as(port: u16, pid: u32, tls: bool) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    if tls {
        return true;
    }
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    if stream.write_all(b"INFO server\r\n").is_err() {
        return false;
    }
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n @ 1..) = stream.read(&mut chunk) {
        reply.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some(line) = text.lines().find(|l| l.starts_with("process_id:")) {
            return line.trim_end() == format!("process_id:{pid}");
        }
    }
    false
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A free port whose cluster bus port (+10000) is free too. Both stay below
/// 32768, out of the kernel's ephemeral range (32768–60999 here), so no
/// outgoing connection can take one between this check and the bind.
fn free_port_with_bus() -> u16 {
    loop {
        let port = 10_000 + (rand_u32() % 12_768) as u16;
        let both_free = TcpListener::bind(("127.0.0.1", port)).is_ok()
            && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok();
        if both_free {
            return port;
        }
    }
}

/// Enough randomness to spread parallel tests over the port range.
fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now()) as u32
}
