//! The Lua scripts against the domain functions they mirror, on real Redis.
//!
//! The read-modify-write rules must run inside Redis to be atomic, so the
//! prune, the failure floor and the admission window exist twice: as pure
//! functions in `domain` and as scripts in `storage/scripts`. These property
//! tests run both on the same random inputs and demand the same answers, so
//! the two copies cannot drift apart.
//!
//! They live inside the crate because the script calls are crate-private:
//! only the record flow may write. They start their own `redis-server` with
//! the integration tests' harness, the `test-support` crate.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::{HashesInterface, KeysInterface};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use tokio_util::task::TaskTracker;

use crate::domain::admission::Decision;
use crate::domain::admission::{WindowCounters, decide};
use crate::domain::attempts::AttemptDigest;
use crate::domain::combo::Combo;
use crate::domain::counts::{Recorded, after_failure};
use crate::domain::ids::{Connector, CustomerId, MerchantId, PaymentMethod, PaymentMethodType};
use crate::domain::import_mark::ImportMark;
use crate::domain::keys::{self, AdmissionKey, CustomerKey};
use crate::domain::prune::fields_to_prune;
use crate::domain::tenant::Tenant;
use crate::storage::{
    AdmissionRequest, BatchOutcome, FailureWrite, Op, RedisSettings, RedisStore, Reply, Secret,
    StorageError, SuccessWrite, Times,
};
use crate::telemetry::Metrics;

use test_support::redis_server::{RedisServer, SERVICE_PASSWORD, SERVICE_USER};

/// Settings for the store: the least-privilege user, a small pool.
fn test_settings(redis: &RedisServer) -> RedisSettings {
    settings_for_url(redis.url())
}

/// The same against any Redis URL (a Cluster's).
fn settings_for_url(url: String) -> RedisSettings {
    RedisSettings {
        url: url.into(),
        username: Some(SERVICE_USER.into()),
        password: Some(Secret::new(SERVICE_PASSWORD)),
        tls: None,
        pool_size: 2,
        command_timeout: Duration::from_secs(1),
        queue_limit: 1024,
    }
}

fn customer_key(merchant: &str, customer: &str) -> CustomerKey {
    keys::customer_key(
        &Tenant::DEFAULT,
        &MerchantId::parse(merchant).unwrap(),
        &CustomerId::parse(customer).unwrap(),
    )
}

fn admission_key(merchant: &str) -> AdmissionKey {
    keys::admission_key(&Tenant::DEFAULT, &MerchantId::parse(merchant).unwrap())
}

/// Runs one op as a batch of one (the batch script, as the import sends
/// it); its decoded reply.
fn run_one(h: &Harness, op: Op<'_>) -> Result<Reply, StorageError> {
    match h.runtime.block_on(h.store.run_batch(vec![op])).remove(0) {
        BatchOutcome::Replied(reply) => reply,
        other => panic!("the script did not answer: {other:?}"),
    }
}

/// An import row's success: standing for `times` outcomes, with its mark.
fn success_op<'a>(
    key: &'a CustomerKey,
    write: SuccessWrite<'a>,
    times: u32,
    mark: Option<ImportMark>,
) -> Op<'a> {
    let times = Times { times, mark };
    Op::Success { key, write, times }
}

/// An import row's failure, as [`success_op`].
fn failure_op<'a>(
    key: &'a CustomerKey,
    field: &'a str,
    ttl_secs: u64,
    attempt: Option<AttemptDigest>,
    times: u32,
    mark: Option<ImportMark>,
) -> Op<'a> {
    let write = FailureWrite {
        field,
        ttl_secs,
        attempt,
    };
    let times = Times { times, mark };
    Op::Failure { key, write, times }
}

/// A write's reply as a count change: `None` for a success that found no
/// hash and could not create it.
fn recorded(reply: Reply) -> Option<Recorded> {
    match reply {
        Reply::Recorded(recorded) => Some(recorded),
        Reply::NeedsAdmission => None,
        other => panic!("a write answered {other:?}"),
    }
}

/// An admission's reply as the domain's decision (for one customer).
fn decision(reply: Reply) -> Decision {
    match reply {
        Reply::Admitted { admitted, counters } => Decision {
            admitted: admitted == 1,
            counters,
        },
        other => panic!("admit answered {other:?}"),
    }
}

/// RecordOutcome's success write, one call.
async fn write_success(
    store: &RedisStore,
    key: &CustomerKey,
    write: SuccessWrite<'_>,
    deadline: Instant,
) -> Result<Option<Recorded>, StorageError> {
    let times = Times::ONE;
    let reply = store
        .run(Op::Success { key, write, times }, deadline)
        .await?;
    Ok(recorded(reply))
}

/// RecordOutcome's failure write, one call.
async fn write_failure(
    store: &RedisStore,
    key: &CustomerKey,
    combo: &Combo,
    ttl_secs: u64,
    attempt: Option<AttemptDigest>,
    deadline: Instant,
) -> Result<Recorded, StorageError> {
    let op = failure_op(key, combo.field(), ttl_secs, attempt, 1, None);
    let reply = store.run(op, deadline).await?;
    Ok(recorded(reply).expect("a failure always answers"))
}

/// RecordOutcome's admission of one customer.
async fn admit(
    store: &RedisStore,
    key: &AdmissionKey,
    request: AdmissionRequest,
    deadline: Instant,
) -> Result<Decision, StorageError> {
    let op = Op::Admit {
        key,
        request,
        asking: 1,
    };
    Ok(decision(store.run(op, deadline).await?))
}

mod attempts;
mod batch;
mod breaker;
mod breaker_log;
mod breaker_shard;
mod counts;
mod experiment;
mod experiment_log;
mod import_mark;

/// A store and an inspection client on one Redis, driven from sync proptest.
struct Harness {
    runtime: tokio::runtime::Runtime,
    store: RedisStore,
    metrics: Arc<Metrics>,
    inspect: fred::prelude::Client,
    _redis: RedisServer,
}

impl Harness {
    fn new() -> Self {
        let redis = RedisServer::start();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let settings = test_settings(&redis);
        let metrics = Arc::new(Metrics::new().unwrap());
        let (store, inspect) = runtime.block_on(async {
            let store =
                RedisStore::connect(&settings, &TaskTracker::new(), metrics.clone()).unwrap();
            assert!(store.wait_connected(Duration::from_secs(5)).await);
            let inspect = fred::prelude::Builder::from_config(
                fred::prelude::Config::from_url(&redis.url()).unwrap(),
            )
            .build()
            .unwrap();
            fred::prelude::ClientLike::init(&inspect).await.unwrap();
            (store, inspect)
        });
        Self {
            runtime,
            store,
            metrics,
            inspect,
            _redis: redis,
        }
    }

    fn hash(&self, key: &str) -> HashMap<String, i64> {
        self.runtime.block_on(self.inspect.hgetall(key)).unwrap()
    }

    /// Every field and value as stored, bytes and all.
    fn raw(&self, key: &str) -> HashMap<String, Vec<u8>> {
        let flat: HashMap<String, fred::bytes::Bytes> =
            self.runtime.block_on(self.inspect.hgetall(key)).unwrap();
        flat.into_iter().map(|(f, v)| (f, v.to_vec())).collect()
    }

    fn ttl(&self, key: &str) -> i64 {
        self.runtime.block_on(self.inspect.ttl(key)).unwrap()
    }

    fn pttl(&self, key: &str) -> i64 {
        self.runtime.block_on(self.inspect.pttl(key)).unwrap()
    }

    /// Every key matching `pattern` in this Redis.
    fn keys_matching(&self, pattern: &str) -> Vec<String> {
        use fred::interfaces::ClientLike as _;
        self.runtime.block_on(async {
            let keys: fred::prelude::Value = self
                .inspect
                .custom(
                    fred::types::CustomCommand::new_static(
                        "KEYS",
                        fred::types::ClusterHash::Random,
                        false,
                    ),
                    vec![pattern],
                )
                .await
                .unwrap();
            keys.into_array()
                .into_iter()
                .map(|k| k.into_string().unwrap())
                .collect()
        })
    }

    fn arrange(&self, key: &str, fields: &HashMap<String, i64>) {
        self.runtime.block_on(async {
            let _: () = self.inspect.del(key).await.unwrap();
            if !fields.is_empty() {
                let pairs: Vec<(String, String)> = fields
                    .iter()
                    .map(|(f, c)| (f.clone(), c.to_string()))
                    .collect();
                let _: () = self.inspect.hset(key, pairs).await.unwrap();
                let _: () = self.inspect.expire(key, 1000, None).await.unwrap();
            }
        });
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

/// Field names that exercise the bytewise tie-break: mixed case, digits,
/// and bytes above 0x7f (where a locale-aware compare would differ).
fn field_name() -> impl Strategy<Value = String> {
    "[aAbB0é]{1,3}".prop_map(|c| format!("INTERAC:RTP:{c}"))
}

fn runner() -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    })
}

#[test]
fn the_success_script_prunes_as_the_domain_does() {
    let h = Harness::new();
    let inputs = (
        proptest::collection::hash_map(field_name(), 1i64..4, 0..10),
        field_name(),
        1u32..8,
    );
    runner()
        .run(&inputs, |(mut existing, new_field, cap)| {
            let key = customer_key("prop", "prune");
            existing.remove(&new_field);
            h.arrange(&key, &existing);

            let write = SuccessWrite {
                field: &new_field,
                ttl_secs: 100,
                cap,
                create: true,
                attempt: None,
            };
            let reply = h
                .runtime
                .block_on(write_success(&h.store, &key, write, deadline()))
                .unwrap();

            let mut after_write: Vec<(String, i64)> = existing.into_iter().collect();
            after_write.push((new_field.clone(), 1));
            let victims = fields_to_prune(&after_write, cap as usize, &new_field);
            let expected: HashMap<String, i64> = after_write
                .iter()
                .filter(|(f, _)| !victims.contains(&f.as_str()))
                .cloned()
                .collect();
            prop_assert_eq!(
                reply,
                Some(Recorded::Applied {
                    net_count: 1,
                    pruned: victims.len() as u32
                })
            );
            prop_assert_eq!(h.hash(&key), expected);
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_failure_script_floors_as_the_domain_does() {
    let h = Harness::new();
    runner()
        .run(&(1i64..5, 0usize..3), |(count, others)| {
            let key = customer_key("prop", "failure");
            let combo = Combo::new(
                &PaymentMethod::parse("INTERAC").unwrap(),
                &PaymentMethodType::parse("RTP").unwrap(),
                &Connector::parse("X").unwrap(),
            )
            .unwrap();
            let field = combo.field().to_string();
            let mut fields: HashMap<String, i64> = (0..others)
                .map(|i| (format!("CARD:DEBIT:{i}"), 3))
                .collect();
            fields.insert(field.clone(), count);
            h.arrange(&key, &fields);

            let reply = h
                .runtime
                .block_on(write_failure(&h.store, &key, &combo, 100, None, deadline()))
                .unwrap();

            let effect = after_failure(count);
            prop_assert_eq!(
                reply,
                Recorded::Applied {
                    net_count: effect.net_count(),
                    pruned: 0
                }
            );
            let stored = h.hash(&key);
            prop_assert_eq!(stored.get(&field).copied().unwrap_or(0), effect.net_count());
            prop_assert_eq!(stored.len(), others + usize::from(effect.net_count() > 0));
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_admission_script_decides_as_the_domain_does() {
    let h = Harness::new();
    let inputs = (
        proptest::option::of((0i64..6, 0u64..6, 0u64..6)),
        0i64..6_000,
        1i64..2_000,
        0u64..8,
    );
    runner()
        .run(&inputs, |(stored, now, window, budget)| {
            let key = admission_key("prop");
            let stored = stored.map(|(window, current, previous)| WindowCounters {
                window,
                current,
                previous,
            });
            let fields: HashMap<String, i64> = stored.map_or_else(HashMap::new, |s| {
                HashMap::from([
                    ("w".into(), s.window),
                    ("cur".into(), s.current as i64),
                    ("prev".into(), s.previous as i64),
                ])
            });
            h.arrange(&key, &fields);

            let request = AdmissionRequest {
                now_ms: now,
                window_ms: window,
                budget,
            };
            let decision = h
                .runtime
                .block_on(admit(&h.store, &key, request, deadline()))
                .unwrap();

            let expected = decide(stored, now, window, budget);
            prop_assert_eq!(decision, expected);
            let after = h.hash(&key);
            if expected.admitted {
                let c = expected.counters;
                let stored_after = HashMap::from([
                    ("w".into(), c.window),
                    ("cur".into(), c.current as i64),
                    ("prev".into(), c.previous as i64),
                ]);
                prop_assert_eq!(after, stored_after);
            } else {
                prop_assert_eq!(after, fields, "a refusal writes nothing");
            }
            Ok(())
        })
        .unwrap();
}

/// The number of commands Redis has run, from `INFO stats`.
fn commands_processed(h: &Harness) -> u64 {
    let info: String = h
        .runtime
        .block_on(fred::prelude::ClientLike::info(
            &h.inspect,
            Some(fred::types::InfoKind::Stats),
        ))
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("total_commands_processed:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_call_whose_deadline_has_passed_is_never_sent() {
    let h = Harness::new();
    let key = customer_key("m", "late");
    let passed = Instant::now() - Duration::from_millis(1);
    let before = commands_processed(&h);
    let write = SuccessWrite {
        field: "INTERAC:RTP:X",
        ttl_secs: 100,
        cap: 30,
        create: true,
        attempt: None,
    };
    let result = h
        .runtime
        .block_on(write_success(&h.store, &key, write, passed));
    assert!(
        matches!(result, Err(StorageError::DeadlineExceeded)),
        "{result:?}"
    );
    // Only this INFO itself ran.
    assert_eq!(commands_processed(&h), before + 1);
    assert!(h.hash(&key).is_empty());
    // A failed call, but no Redis time: it never reached the client.
    let text = h.metrics.render();
    assert!(
        text.contains("sticky_routing_redis_errors_total{kind=\"deadline_exceeded\"} 1"),
        "{text}"
    );
    assert!(
        !text.contains("sticky_routing_redis_command_duration_seconds_count"),
        "{text}"
    );
}
