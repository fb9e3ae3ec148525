//! The Redis side of the measurements: `INFO` snapshots (commands sent,
//! socket reads, memory) and filling a database with customers for the
//! memory-at-scale figure.

use std::collections::BTreeMap;

use fred::clients::Client;
use fred::interfaces::{ClientLike, HashesInterface, KeysInterface};
use fred::prelude::{Builder, Config};
use fred::types::InfoKind;
use sticky_routing::domain::combo::Combo;
use sticky_routing::domain::ids::{
    Connector, CustomerId, MerchantId, PaymentMethod, PaymentMethodType,
};
use sticky_routing::domain::keys;
use sticky_routing::domain::tenant::Tenant;

use crate::BoxError;
use crate::workload::{combo_parts, customer_id, merchant_id, merchant_of, tenant_of};

/// The commands a client of Redis sends for these calls. `INFO
/// commandstats` also counts the commands a script runs inside Redis
/// (EXISTS, HINCRBY, EXPIRE…), which are no round trips; those, and the
/// bench's INFO and the readiness PING, are left out of the per-call count.
/// (HGETALL also runs inside the prune; the bench's default combos stay
/// under the cap, so no prune runs.)
const SENT_BY_CLIENTS: [&str; 9] = [
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "hgetall",
    "ttl",
    "del",
    "multi",
    "exec",
];

/// The counters that matter, at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `cmdstat_*` calls by command.
    pub calls: BTreeMap<String, u64>,
    /// `total_reads_processed`: socket reads, so pipelined commands share one.
    pub reads: u64,
    pub used_memory: u64,
}

impl Snapshot {
    /// Commands sent per call between `self` and `later`, by command.
    pub fn commands_per_call(&self, later: &Snapshot, calls: u64) -> BTreeMap<String, f64> {
        later
            .calls
            .iter()
            .filter(|(name, _)| SENT_BY_CLIENTS.contains(&name.as_str()))
            .filter_map(|(name, n)| {
                let delta = n.saturating_sub(self.calls.get(name).copied().unwrap_or(0));
                (delta > 0).then(|| (name.clone(), per(delta, calls)))
            })
            .collect()
    }

    /// Socket reads per call between `self` and `later`.
    pub fn reads_per_call(&self, later: &Snapshot, calls: u64) -> f64 {
        per(later.reads.saturating_sub(self.reads), calls)
    }
}

fn per(n: u64, calls: u64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let ratio = n as f64 / calls.max(1) as f64;
    ratio
}

/// A single plain connection for INFO and the memory fill.
pub struct RedisProbe {
    client: Client,
}

impl RedisProbe {
    pub async fn connect(url: &str) -> Result<Self, BoxError> {
        let client = Builder::from_config(Config::from_url(url)?).build()?;
        client.init().await?;
        Ok(Self { client })
    }

    pub async fn snapshot(&self) -> Result<Snapshot, BoxError> {
        let commandstats: String = self.client.info(Some(InfoKind::CommandStats)).await?;
        let stats: String = self.client.info(Some(InfoKind::Stats)).await?;
        let memory: String = self.client.info(Some(InfoKind::Memory)).await?;
        Ok(Snapshot {
            calls: parse_commandstats(&commandstats),
            reads: field(&stats, "total_reads_processed").unwrap_or(0),
            used_memory: field(&memory, "used_memory").unwrap_or(0),
        })
    }

    /// The server's name and version: `valkey 8.0.1`, or `redis_version`
    /// alone for Redis. Valkey answers `redis_version:7.2.4` for clients
    /// that check it, and names its own release in `valkey_version`.
    pub async fn version(&self) -> Result<String, BoxError> {
        let server: String = self.client.info(Some(InfoKind::Server)).await?;
        Ok(server_version(&server))
    }

    /// Empties the database, synchronously, so `used_memory` settles.
    pub async fn flush(&self) -> Result<(), BoxError> {
        self.client.flushall::<()>(false).await?;
        Ok(())
    }

    /// Deletes what the previous run's service left for another instance
    /// to finish: the breaker's and the experiment's counts logs and the
    /// experiment log's state. Else the next run's service would fold or
    /// add them, and pay for its predecessor's work (a baseline with the
    /// breaker and the experiment off would add the previous run's last
    /// minute of experiment counts). KEYS, once between runs: the bench's
    /// own Redis, never a service's.
    pub async fn clear_background_state(&self) -> Result<(), BoxError> {
        for pattern in ["sticky_brk_l{*", "sticky_exp_l{*", "sticky_exp_m{*"] {
            let found: Vec<String> = self
                .client
                .custom(
                    fred::types::CustomCommand::new_static(
                        "KEYS",
                        fred::types::ClusterHash::Random,
                        false,
                    ),
                    vec![pattern],
                )
                .await?;
            for key in found {
                self.client.del::<(), _>(key).await?;
            }
        }
        Ok(())
    }

    /// Writes `customers` hashes of `combos` fields each, with a TTL, in the
    /// service's key and field encoding; returns `used_memory` growth per
    /// customer.
    pub async fn bytes_per_customer(
        &self,
        customers: u64,
        combos: u64,
        merchants: u64,
    ) -> Result<f64, BoxError> {
        self.flush().await?;
        let before = self.snapshot().await?.used_memory;
        self.write_customers(customers, combos, merchants, 0)
            .await?;
        let after = self.snapshot().await?.used_memory;
        self.flush().await?;
        Ok(per(after.saturating_sub(before), customers))
    }

    /// Writes customers 1 to `customers`, each with all `combos` at a count
    /// of 3 and a 90-day TTL, in the service's key and field encoding, for
    /// the merchant and tenant the generator sends them with
    /// ([`merchant_of`], [`tenant_of`]): a key space every RecordOutcome then
    /// finds, without a call through the service. Pipelined, 1000
    /// customers a batch.
    pub async fn write_customers(
        &self,
        customers: u64,
        combos: u64,
        merchants: u64,
        tenants: u64,
    ) -> Result<(), BoxError> {
        let fields: Vec<String> = (0..combos).map(combo_field).collect::<Result<_, _>>()?;
        let mut customer = 0;
        while customer < customers {
            let pipeline = self.client.pipeline();
            for _ in 0..1000.min(customers - customer) {
                customer += 1;
                let merchant = merchant_of(customer, merchants);
                let tenant = match tenant_of(merchant, tenants) {
                    Some(name) => Tenant::parse(&name)?,
                    None => Tenant::DEFAULT,
                };
                let merchant = MerchantId::parse(&merchant_id(merchant))?;
                let customer_id = CustomerId::parse(&customer_id(customer))?;
                let key = keys::customer_key(&tenant, &merchant, &customer_id);
                let values: Vec<(&str, i64)> = fields.iter().map(|f| (f.as_str(), 3)).collect();
                pipeline.hset::<(), _, _>(key.as_str(), values).await?;
                pipeline
                    .expire::<(), _>(key.as_str(), 90 * 86_400, None)
                    .await?;
            }
            pipeline.all::<()>().await?;
        }
        Ok(())
    }

    pub async fn quit(&self) {
        let _ = self.client.quit().await;
    }
}

fn combo_field(combo: u64) -> Result<String, BoxError> {
    let (method, method_type, connector) = combo_parts(combo);
    let combo = Combo::new(
        &PaymentMethod::parse(method)?,
        &PaymentMethodType::parse(method_type)?,
        &Connector::parse(&connector)?,
    )?;
    Ok(combo.field().to_owned())
}

/// [`RedisProbe::version`] from an `INFO server` reply.
fn server_version(info: &str) -> String {
    let value = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    match value("valkey_version") {
        Some(valkey) => format!("valkey {valkey}"),
        None => value("redis_version").unwrap_or_else(|| "unknown".to_owned()),
    }
}

/// `cmdstat_evalsha:calls=12,usec=…` lines → {"evalsha": 12}.
fn parse_commandstats(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// A `name:value` line of an INFO section, as a number.
fn field(info: &str, name: &str) -> Option<u64> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMANDSTATS: &str = "# Commandstats\r\n\
        cmdstat_evalsha:calls=120,usec=900,usec_per_call=7.50,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=4,usec=80,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_hgetall:calls=7,usec=9,usec_per_call=1.29,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_hincrby:calls=120,usec=9,usec_per_call=0.07,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn valkey_is_named_by_its_own_version_not_its_redis_compatibility_one() {
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n";
        assert_eq!(server_version(valkey), "valkey 8.0.1");
        assert_eq!(
            server_version("# Server\r\nredis_version:7.0.15\r\n"),
            "7.0.15"
        );
    }

    #[test]
    fn commandstats_are_parsed_by_command() {
        let calls = parse_commandstats(COMMANDSTATS);
        assert_eq!(calls.get("evalsha"), Some(&120));
        assert_eq!(calls.get("hgetall"), Some(&7));
        assert_eq!(calls.len(), 4);
    }

    #[test]
    fn per_call_figures_leave_housekeeping_out() {
        let before = Snapshot {
            calls: [("evalsha".to_owned(), 20), ("info".to_owned(), 1)].into(),
            reads: 100,
            used_memory: 0,
        };
        let after = Snapshot {
            calls: parse_commandstats(COMMANDSTATS),
            reads: 150,
            used_memory: 0,
        };
        let per_call = before.commands_per_call(&after, 100);
        assert_eq!(per_call.get("evalsha"), Some(&1.0));
        assert_eq!(per_call.get("hgetall"), Some(&0.07));
        assert!(!per_call.contains_key("info"));
        assert!(!per_call.contains_key("hincrby"), "run inside the script");
        assert!((before.reads_per_call(&after, 100) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn stats_fields_are_found_by_exact_name() {
        let info = "total_reads_processed_x:9\r\ntotal_reads_processed:42\r\n";
        assert_eq!(field(info, "total_reads_processed"), Some(42));
        assert_eq!(field(info, "used_memory"), None);
    }
}
