//! The breaker's keys on real Redis: GetConnectorHealth's rows from the
//! hashes, the index and the engine's windows; a TTL within its bound on
//! every key, a tenant's own keys, a value the breaker never writes, one
//! slot on Cluster, and no key made that could not get its TTL.

use super::*;

#[test]
fn health_lists_trips_counts_and_overrides_in_bytewise_order() {
    let h = Harness::new();
    let s = settings();
    let m = merchant("m");
    let now = T0;
    // "Z" < "a" < "é" bytewise.
    let tripped = h.transition("m", "a", trip(), now).unwrap();
    let over = OverrideUntil {
        kind: Override::ForceClosed,
        until_ms: now + 60_000,
    };
    h.runtime.block_on(async {
        h.store
            .index_trip(&Tenant::DEFAULT, &m, "a", tripped, &s, deadline())
            .await
            .unwrap();
        h.store
            .set_override(&Tenant::DEFAULT, &m, "Z", Some(over), now, deadline())
            .await
            .unwrap();
    });
    // The CLOSED windows are the engine's; "a"'s, OPEN, is not shown.
    let windows = [("é", counts(3, 1)), ("a", counts(25, 12))];
    let rows = h.health("m", &windows, now + 1);
    assert_eq!(
        rows,
        vec![
            ConnectorHealthRow {
                connector: "Z".into(),
                state: BreakerState::Closed,
                counts: counts(0, 0),
                open_until_ms: 0,
                over: Some(over),
            },
            ConnectorHealthRow {
                connector: "a".into(),
                state: BreakerState::Open {
                    until_ms: tripped.open_until_ms
                },
                counts: counts(20, 10),
                open_until_ms: tripped.open_until_ms,
                over: None,
            },
            ConnectorHealthRow {
                connector: "é".into(),
                state: BreakerState::Closed,
                counts: counts(3, 1),
                open_until_ms: 0,
                over: None,
            },
        ]
    );
    // HALF-OPEN: the probes so far.
    let t = tripped.open_until_ms;
    h.flush("m", &[probes("a", t, 2, 1)], t);
    let rows = h.health("m", &windows, t + 1);
    let a = rows.iter().find(|r| r.connector == "a").unwrap();
    assert_eq!(a.state, BreakerState::HalfOpen { since_ms: t });
    assert_eq!((a.counts, a.open_until_ms), (counts(2, 1), 0));
    // An unknown merchant has no rows.
    assert!(h.health("nobody", &[], now).is_empty());
}

#[test]
fn every_key_the_breaker_writes_has_a_ttl_within_the_bounds() {
    let h = Harness::new();
    let s = settings();
    let m = merchant("m");
    let b = s.bucket_of(T0);
    h.flush(
        "m",
        &[buckets("a", &[(b, 20, 10)]), buckets("b", &[(b, 1, 0)])],
        T0,
    );
    // The counts went to the shard's log, which lives W and 3 buckets.
    assert!(h.strings(&counts_key("m")).is_empty());
    assert!(
        (W + 3 * B - 1_000..=W + 3 * B).contains(&h.pttl(&log_key("m", T0))),
        "a log key lives W + 3 B"
    );
    let t = h.transition("m", "a", trip(), T0).unwrap().open_until_ms;
    h.flush("n", &[probes("a", T0, 1, 0)], T0 + 1);
    h.transition(
        "n",
        "a",
        BreakerTransition::Reopen { open_until_ms: T0 },
        T0 + 2,
    )
    .unwrap();
    h.transition("n", "a", trip(), T0 + 2 + OPEN_FOR + HALF)
        .unwrap();
    h.flush("p", &[probes("a", T0, 1, 0)], T0 + 1);
    h.transition(
        "p",
        "a",
        BreakerTransition::Close { open_until_ms: T0 },
        T0 + 2,
    )
    .unwrap();
    h.runtime.block_on(async {
        let tripped = Tripped {
            open_until_ms: t,
            calls: 20,
            failures: 10,
        };
        h.store
            .index_trip(&Tenant::DEFAULT, &m, "a", tripped, &s, deadline())
            .await
            .unwrap();
    });
    let keys = h.breaker_keys();
    assert!(keys.len() >= 6, "{keys:?}");
    let bound = HALF.max(OPEN_FOR);
    for key in keys {
        let ttl = h.pttl(&key);
        let bound = if key.starts_with("sticky_brk_o") {
            OPEN_FOR
        } else {
            bound
        };
        assert!(
            ttl > 0 && ttl <= bound,
            "{key}: PTTL {ttl} not in (0, {bound}]"
        );
    }
    // A trip keeps the counts hash for OPEN_FOR at least; the open key
    // lives exactly OPEN_FOR.
    assert!(h.pttl(&counts_key("m")) > HALF);
    assert!(h.pttl(&open_key("m", "a")) > OPEN_FOR - 1_000);

    // An override's TTL is the override's.
    let over = OverrideUntil {
        kind: Override::ForceOpen,
        until_ms: T0 + 3_600_000,
    };
    h.runtime
        .block_on(
            h.store
                .set_override(&Tenant::DEFAULT, &m, "a", Some(over), T0, deadline()),
        )
        .unwrap();
    let ttl = h.pttl(&index_key("m"));
    assert!((3_599_000..=3_600_000).contains(&ttl), "{ttl}");
}

#[test]
fn a_tenants_breaker_is_its_own_and_every_key_it_writes_has_a_ttl() {
    let h = Harness::new();
    let s = settings();
    let acme = Tenant::parse("acme").unwrap();
    let m = merchant("m");
    let b = s.bucket_of(T0);
    // The default tenant's m/a sees a few calls; acme's m/a enough to trip.
    h.flush("m", &[buckets("a", &[(b, 3, 0)])], T0);
    let tripped = h.runtime.block_on(async {
        let store = &h.store;
        let flushed = store
            .flush_breakers(
                &acme,
                &m,
                &[buckets("a", &[(b, 20, 10)])],
                T0,
                &s,
                deadline(),
            )
            .await
            .unwrap();
        assert!(flushed.is_empty(), "no probes: nothing of the hash");
        let tripped = store
            .transition_breaker(&acme, &m, "a", trip(), T0, &s, deadline())
            .await
            .unwrap()
            .unwrap();
        store
            .index_trip(&acme, &m, "a", tripped, &s, deadline())
            .await
            .unwrap();
        let over = OverrideUntil {
            kind: Override::ForceClosed,
            until_ms: T0 + 60_000,
        };
        store
            .set_override(&acme, &m, "b", Some(over), T0, deadline())
            .await
            .unwrap();
        tripped
    });
    assert_eq!(tripped.counts(), counts(20, 10));
    // The default tenant's breaker of the same ids neither counted acme's
    // calls nor tripped.
    assert_eq!(h.snapshot("m", "a", T0 + 1).tripped, None);

    let acme_counts = keys::breaker_counts_key(&acme, &m);
    let acme_open = keys::breaker_open_key(&acme, &m, "a");
    let acme_index = keys::breaker_index_key(shard_of(&acme, &m));
    let tag = shard_of(&acme, &m).tag();
    assert_eq!(
        acme_counts,
        format!("sticky_brk_c{{{tag}}}%Tacme_m").as_str()
    );
    assert_eq!(
        acme_open,
        format!("sticky_brk_o{{{tag}}}%Tacme_m_a").as_str()
    );
    let mut keys = h.breaker_keys();
    keys.sort();
    // Each tenant's counts went to its merchant's shard's log.
    let mut expected = vec![
        acme_index.as_str().to_owned(),
        log_key("m", T0),
        keys::breaker_log_key(shard_of(&acme, &m), b),
        acme_counts.as_str().to_owned(),
        acme_open.as_str().to_owned(),
    ];
    expected.sort();
    expected.dedup();
    assert_eq!(keys, expected);
    for key in &keys {
        let ttl = h.pttl(key);
        let bound = if key.starts_with("sticky_brk_i{") {
            60_000
        } else if key.starts_with("sticky_brk_o") {
            OPEN_FOR
        } else {
            HALF.max(OPEN_FOR)
        };
        assert!(
            ttl > 0 && ttl <= bound,
            "{key}: PTTL {ttl} not in (0, {bound}]"
        );
    }
    assert!(h.pttl(acme_open.as_str()) > OPEN_FOR - 1_000);

    // The shared index names acme's breakers with acme, and the default
    // tenant's health has none of them.
    let entries = h.poll(T0 + 1);
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(
        entries
            .iter()
            .all(|e| e.tenant == acme && e.merchant == "m")
    );
    let default_rows = h.health("m", &[("a", counts(3, 0))], T0 + 1);
    assert_eq!(default_rows.len(), 1);
    assert_eq!(
        (default_rows[0].state, default_rows[0].over),
        (BreakerState::Closed, None)
    );
    let acme_rows = h
        .runtime
        .block_on(
            h.store
                .breaker_health(&acme, &m, &[], T0 + 1, &s, deadline()),
        )
        .unwrap();
    let states: Vec<_> = acme_rows
        .iter()
        .map(|r| (r.connector.as_str(), r.state))
        .collect();
    assert_eq!(
        states,
        [
            (
                "a",
                BreakerState::Open {
                    until_ms: tripped.open_until_ms
                }
            ),
            ("b", BreakerState::Closed),
        ]
    );
    // Past their lifetimes, the poll prunes a tenant's entries as it does
    // the default tenant's.
    assert!(h.poll(T0 + 60_000).is_empty());
    assert!(h.strings(acme_index.as_str()).is_empty());
}

#[test]
fn a_stored_value_the_breaker_never_writes_stops_the_flush_unwritten() {
    let h = Harness::new();
    let key = counts_key("m");
    h.runtime.block_on(async {
        let _: () = h.inspect.hset(&key, ("t:a", "soon")).await.unwrap();
        let _: () = h.inspect.expire(&key, 100, None).await.unwrap();
    });
    let result = h.runtime.block_on(h.store.flush_breakers(
        &Tenant::DEFAULT,
        &merchant("m"),
        &[probes("a", T0, 1, 1)],
        T0,
        &settings(),
        deadline(),
    ));
    assert!(
        matches!(result, Err(StorageError::ForeignValue { .. })),
        "{result:?}"
    );
    assert_eq!(
        h.strings(&key),
        HashMap::from([("t:a".to_owned(), "soon".to_owned())])
    );
}

#[test]
fn the_two_key_transition_runs_in_one_slot_on_cluster() {
    let cluster = test_support::redis_cluster::RedisCluster::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let settings_of_store = settings_for_url(cluster.url());
    runtime.block_on(async {
        let metrics = Arc::new(Metrics::new().unwrap());
        let store = RedisStore::connect(&settings_of_store, &TaskTracker::new(), metrics).unwrap();
        assert!(store.wait_connected(Duration::from_secs(10)).await);
        let s = settings();
        // Merchants whose hash tags land on different shards, and a
        // connector with the escaped bytes.
        for m in ["m", "shop-1", "{odd}"] {
            let m = merchant(m);
            let b = s.bucket_of(T0);
            let tally = buckets("con{x}%", &[(b, 4, 4)]);
            let trip = BreakerTransition::Trip {
                window: counts(4, 4),
            };
            store
                .flush_breakers(&Tenant::DEFAULT, &m, &[tally], T0, &s, deadline())
                .await
                .unwrap();
            let tripped = store
                .transition_breaker(&Tenant::DEFAULT, &m, "con{x}%", trip, T0, &s, deadline())
                .await
                .unwrap();
            assert_eq!(tripped.map(|t| t.counts()), Some(counts(4, 4)));
            let closed = store
                .transition_breaker(
                    &Tenant::DEFAULT,
                    &m,
                    "con{x}%",
                    BreakerTransition::Close {
                        open_until_ms: T0 + OPEN_FOR,
                    },
                    T0 + OPEN_FOR,
                    &s,
                    deadline(),
                )
                .await
                .unwrap();
            assert!(closed.is_some());
            let rows = store
                .breaker_health(&Tenant::DEFAULT, &m, &[], T0 + OPEN_FOR, &s, deadline())
                .await
                .unwrap();
            assert!(rows.is_empty(), "{rows:?}");
        }
        store
            .index_trip(
                &Tenant::DEFAULT,
                &merchant("m"),
                "c",
                Tripped {
                    open_until_ms: T0,
                    calls: 1,
                    failures: 1,
                },
                &s,
                deadline(),
            )
            .await
            .unwrap();
        let entries = store.poll_breaker_index(T0, &s, deadline()).await.unwrap();
        assert_eq!(entries.len(), 1);
        store.quit().await;
    });
}

#[test]
fn a_key_that_could_not_be_given_its_ttl_is_never_made() {
    let h = Harness::new();
    let port = h._redis.port;
    let revoke = ["ACL", "SETUSER", SERVICE_USER, "-pexpire"];
    test_support::redis_server::redis_cli(port, &revoke);
    let s = settings();
    let m = merchant("m");
    let b = s.bucket_of(T0);
    let is_permission = |result: &Result<_, StorageError>| {
        matches!(
            result,
            Err(StorageError::Unavailable {
                why: crate::storage::NotApplied::Permission,
                ..
            })
        )
    };
    h.runtime.block_on(async {
        let store = &h.store;
        let flushed = store
            .flush_breakers(
                &Tenant::DEFAULT,
                &m,
                &[buckets("a", &[(b, 1, 1)])],
                T0,
                &s,
                deadline(),
            )
            .await
            .map(|_| ());
        assert!(is_permission(&flushed), "{flushed:?}");
        let tripped = store
            .transition_breaker(&Tenant::DEFAULT, &m, "a", trip(), T0, &s, deadline())
            .await
            .map(|_| ());
        assert!(is_permission(&tripped), "{tripped:?}");
        let tripped = Tripped {
            open_until_ms: T0,
            calls: 1,
            failures: 1,
        };
        let indexed = store
            .index_trip(&Tenant::DEFAULT, &m, "a", tripped, &s, deadline())
            .await;
        assert!(is_permission(&indexed), "{indexed:?}");
    });
    assert!(h.breaker_keys().is_empty(), "{:?}", h.breaker_keys());
}
