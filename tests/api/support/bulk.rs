//! The bulk commands' harness (`import`, `export`): the binary against a
//! test's Redis, the row files, their summaries, and a model of what the
//! rules make of generated rows.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::Stdio;
use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config, HashesInterface};
use sticky_routing::domain::attempts::is_bookkeeping;
use sticky_routing::domain::ids::{CustomerId, MerchantId};
use sticky_routing::domain::keys::customer_key;
use sticky_routing::domain::tenant::Tenant;
use test_support::redis_server::{EXPORT_PASSWORD, EXPORT_USER};
use tokio::io::AsyncWriteExt;

use crate::support::{
    SERVICE_PASSWORD, SERVICE_USER, TestRedis, Topology, redis_cli, service_binary,
};

pub(crate) const HEADER: &str = "merchant_id,customer_id,payment_method,payment_method_type,connector,outcome,count,attempt_id\n";

/// What one run of the binary did.
pub(crate) struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A test's Redis.
pub(crate) struct Target {
    pub redis: TestRedis,
}

impl Target {
    pub async fn start(topology: Topology) -> Self {
        Self {
            redis: TestRedis::start(topology),
        }
    }

    pub fn vars(&self, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        let mut vars = vec![
            ("STICKY_ROUTING_REDIS_URL", self.redis.url()),
            ("STICKY_ROUTING_REDIS_USERNAME", SERVICE_USER.into()),
            ("STICKY_ROUTING_REDIS_PASSWORD", SERVICE_PASSWORD.into()),
        ];
        vars.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        vars
    }

    /// Runs `sticky-routing import ARGS` with the settings `extra`.
    pub async fn import(&self, args: &[&str], extra: &[(&'static str, &str)]) -> Ran {
        import_with(&self.vars(extra), args, None).await
    }

    /// Every customer hash: key → combo → count (attempts left out).
    pub async fn state(&self) -> BTreeMap<String, BTreeMap<String, i64>> {
        let mut state = BTreeMap::new();
        for port in self.redis.data_ports() {
            let node = Builder::from_config(
                Config::from_url(&format!("redis://127.0.0.1:{port}")).unwrap(),
            )
            .build()
            .unwrap();
            node.init().await.unwrap();
            let cmd = fred::types::CustomCommand::new("KEYS", None::<u16>, false);
            let keys: Vec<String> = node.custom(cmd, vec!["sticky_gw_*"]).await.unwrap();
            for key in keys {
                // Bytes: the attempts bookkeeping is binary.
                let fields: BTreeMap<String, fred::bytes::Bytes> =
                    node.hgetall(&key).await.unwrap();
                let combos = fields
                    .into_iter()
                    .filter(|(f, _)| !is_bookkeeping(f))
                    .map(|(f, v)| (f, std::str::from_utf8(&v).unwrap().parse().unwrap()))
                    .collect();
                state.insert(key, combos);
            }
            let _ = node.quit().await;
        }
        state
    }
}

pub(crate) async fn import_with(
    vars: &[(&'static str, String)],
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Ran {
    run_command("import", vars, args, stdin, Duration::from_secs(120)).await
}

/// Runs `sticky-routing COMMAND ARGS` with the settings `vars`, `stdin`
/// piped in when given, and waits at most `within` for it to end.
pub(crate) async fn run_command(
    subcommand: &str,
    vars: &[(&str, String)],
    args: &[&str],
    stdin: Option<&[u8]>,
    within: Duration,
) -> Ran {
    let mut command = service_binary(vars);
    command.arg(subcommand).args(args);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    if stdin.is_some() {
        command.stdin(Stdio::piped());
    }
    let mut child = command.spawn().unwrap();
    if let Some(bytes) = stdin {
        let mut input = child.stdin.take().unwrap();
        // A command refused before it reads (`-` without `--format`) may
        // exit before the rows are written: a closed pipe is its answer,
        // which the caller checks, not a failure of the harness.
        match input.write_all(bytes).await {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            written => written.unwrap(),
        }
        drop(input);
    }
    let output = tokio::time::timeout(within, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{subcommand} did not end within {within:?}"))
        .unwrap();
    Ran {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

pub(crate) fn file_with(name: &str, text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    (dir, path.to_string_lossy().into_owned())
}

/// The number on the summary line that starts with `name`.
pub(crate) fn summary_count(ran: &Ran, name: &str) -> u64 {
    ran.stdout
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix(name)?
                .split_whitespace()
                .last()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no `{name}` in the summary:\n{}", ran.stdout))
}

/// N of the `resume with --skip N` an import printed on `stderr`.
pub(crate) fn resume_hint(stderr: &str) -> u64 {
    stderr
        .split("resume with --skip ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no resume hint in:\n{stderr}"))
}

/// A small deterministic generator (xorshift), so a failure replays.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

pub(crate) const COMBOS: [(&str, &str, &str); 6] = [
    ("card", "credit", "stripe"),
    ("card", "credit", "adyen"),
    ("card", "debit", "adyen"),
    ("interac", "rtp", "GIGADAT"),
    ("interac", "rtp", "LOONIO"),
    ("wallet", "apple", "stripe"),
];

/// `rows` random rows over `customers` customers of 7 merchants, and what
/// the rules make of them with a cap of `cap` combos (the test's model:
/// success adds, failure subtracts down to deletion, a new combo past the
/// cap prunes the lowest counts, ties bytewise, never the one written).
pub(crate) fn generated(rows: usize, customers: u64, cap: usize, seed: u64) -> (String, Model) {
    let mut rng = Rng(seed);
    let mut text = String::from(HEADER);
    let mut model = Model::default();
    for _ in 0..rows {
        let customer = rng.below(customers);
        let merchant = format!("merchant_{}", customer % 7);
        let customer = format!("cus_{customer}");
        let (pm, pmt, connector) = COMBOS[rng.below(6) as usize];
        let success = rng.below(10) < 6;
        let count = 1 + rng.below(4) as i64;
        let shown_count = if count == 1 && rng.below(2) == 0 {
            String::new()
        } else {
            count.to_string()
        };
        text.push_str(&format!(
            "{merchant},{customer},{pm},{pmt},{connector},{},{shown_count},\n",
            if success {
                "success"
            } else {
                "gateway_failure"
            }
        ));
        let field = format!("{}:{}:{connector}", pm.to_uppercase(), pmt.to_uppercase());
        model.apply(
            &merchant,
            &customer,
            &field,
            if success { count } else { -count },
            cap,
        );
    }
    (text, model)
}

pub(crate) type Model = ModelState;

#[derive(Default)]
pub(crate) struct ModelState(pub BTreeMap<String, BTreeMap<String, i64>>);

impl ModelState {
    pub fn apply(&mut self, merchant: &str, customer: &str, field: &str, delta: i64, cap: usize) {
        let key = customer_key(
            &Tenant::DEFAULT,
            &MerchantId::parse(merchant).unwrap(),
            &CustomerId::parse(customer).unwrap(),
        )
        .as_str()
        .to_owned();
        if delta < 0 {
            let Some(hash) = self.0.get_mut(&key) else {
                return;
            };
            let Some(count) = hash.get_mut(field) else {
                return;
            };
            *count += delta;
            if *count <= 0 {
                hash.remove(field);
            }
            if hash.is_empty() {
                self.0.remove(&key);
            }
            return;
        }
        let hash = self.0.entry(key).or_default();
        let new = !hash.contains_key(field);
        *hash.entry(field.to_owned()).or_default() += delta;
        if new && hash.len() > cap {
            let mut others: Vec<(i64, String)> = hash
                .iter()
                .filter(|(f, _)| f.as_str() != field)
                .map(|(f, c)| (*c, f.clone()))
                .collect();
            others.sort();
            for (_, victim) in others.into_iter().take(hash.len() - cap) {
                hash.remove(&victim);
            }
        }
    }
}

/// How many keys Redis on `port` holds.
pub(crate) fn keys(port: u16) -> u64 {
    redis_cli(port, &["DBSIZE"]).trim().parse().unwrap_or(0)
}

/// Script calls run since Redis started, by SHA or with the body.
pub(crate) fn script_calls(port: u16) -> u64 {
    ["cmdstat_evalsha", "cmdstat_eval"]
        .iter()
        .filter_map(|name| info(port, "commandstats", name))
        .sum()
}

/// `name:value` of `INFO section` on `port`, as a number.
pub(crate) fn info(port: u16, section: &str, name: &str) -> Option<u64> {
    redis_cli(port, &["INFO", section])
        .lines()
        .find_map(|line| {
            let value = line.strip_prefix(name)?.strip_prefix(':')?;
            // `errorstat_X:count=N`, `cmdstat_X:calls=N,…`, or a plain number.
            let value = value.split(',').next()?;
            value.rsplit('=').next()?.trim().parse().ok()
        })
}

/// `sticky-routing export args…` against `url` as the export user.
pub(crate) fn export_command(url: String, args: &[&str]) -> tokio::process::Command {
    let vars = [
        ("STICKY_ROUTING_REDIS_URL", url),
        ("STICKY_ROUTING_REDIS_USERNAME", EXPORT_USER.to_owned()),
        ("STICKY_ROUTING_REDIS_PASSWORD", EXPORT_PASSWORD.to_owned()),
    ];
    let mut command = service_binary(&vars);
    command.arg("export").args(args);
    command
}
