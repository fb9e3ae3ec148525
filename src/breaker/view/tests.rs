//! The view's snapshot: replaced per shard, bounded, fresh per shard, and
//! this instance's own changes held over a poll.

use super::*;

fn acme() -> Tenant {
    Tenant::parse("acme").unwrap()
}

fn index_of(tenant: &Tenant, merchant: &str, connector: &str, until: i64) -> IndexEntry {
    IndexEntry {
        tenant: tenant.clone(),
        merchant: merchant.into(),
        connector: connector.into(),
        tripped: Some(Tripped {
            open_until_ms: until,
            calls: 20,
            failures: 10,
        }),
        over: None,
    }
}

/// A whole tick's polls: every shard answered, with its entries.
fn polls(entries: Vec<IndexEntry>) -> Vec<(Shard, Vec<IndexEntry>)> {
    let mut polls: Vec<(Shard, Vec<IndexEntry>)> =
        Shard::all().map(|shard| (shard, Vec::new())).collect();
    for entry in entries {
        let m = MerchantId::parse(&entry.merchant).unwrap();
        polls[shard_of(&entry.tenant, &m).index()].1.push(entry);
    }
    polls
}

fn index(merchant: &str, connector: &str, until: i64) -> IndexEntry {
    index_of(&Tenant::DEFAULT, merchant, connector, until)
}

fn until(snapshot: &Snapshot, tenant: &Tenant, merchant: &str, connector: &str) -> i64 {
    snapshot
        .entry(tenant, merchant, connector)
        .unwrap()
        .tripped
        .unwrap()
        .open_until_ms
}

#[test]
fn a_poll_replaces_the_view_within_the_bound() {
    let view = View::default();
    let dropped = view.replace(
        polls(vec![
            index("m1", "a", 5),
            index("m1", "b", 6),
            index("m2", "a", 7),
        ]),
        1_000,
        2,
        0,
    );
    assert_eq!(dropped, 1);
    let snapshot = view.load();
    assert_eq!(snapshot.len(), 2);
    assert_eq!(until(&snapshot, &Tenant::DEFAULT, "m1", "a"), 5);
    assert!(snapshot.entry(&Tenant::DEFAULT, "m2", "a").is_none());
    view.replace(polls(vec![index("m2", "a", 7)]), 2_000, 10, 0);
    assert!(view.load().entry(&Tenant::DEFAULT, "m1", "a").is_none());
}

#[test]
fn an_update_changes_one_entry_and_an_empty_one_goes() {
    let view = View::default();
    view.replace(
        polls(vec![index("m1", "a", 5), index("m1", "b", 6)]),
        1_000,
        10,
        0,
    );
    view.update(&Tenant::DEFAULT, "m1", "a", Change::Tripped(None), 10);
    let snapshot = view.load();
    assert!(snapshot.entry(&Tenant::DEFAULT, "m1", "a").is_none());
    assert!(snapshot.entry(&Tenant::DEFAULT, "m1", "b").is_some());
    assert_eq!(snapshot.len(), 1);
}

#[test]
fn two_tenants_with_the_same_merchant_and_connector_are_two_breakers() {
    let (acme, globex) = (acme(), Tenant::parse("globex").unwrap());
    let view = View::default();
    view.replace(
        polls(vec![index("m1", "a", 5), index_of(&acme, "m1", "a", 6)]),
        1_000,
        10,
        0,
    );
    let snapshot = view.load();
    assert_eq!(snapshot.len(), 2);
    assert_eq!(until(&snapshot, &Tenant::DEFAULT, "m1", "a"), 5);
    assert_eq!(until(&snapshot, &acme, "m1", "a"), 6);
    assert!(snapshot.entry(&globex, "m1", "a").is_none());
    let mut seen: Vec<_> = snapshot
        .entries()
        .map(|(t, m, c, _)| (t.clone(), m.to_owned(), c.to_owned()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            (Tenant::DEFAULT, "m1".to_owned(), "a".to_owned()),
            (acme.clone(), "m1".to_owned(), "a".to_owned()),
        ]
    );

    // One tenant's update leaves the other's breaker alone.
    view.update(&acme, "m1", "a", Change::Tripped(None), 10);
    let tripped = Tripped {
        open_until_ms: 9,
        calls: 1,
        failures: 1,
    };
    view.update(&globex, "m1", "a", Change::Tripped(Some(tripped)), 10);
    let snapshot = view.load();
    assert!(snapshot.entry(&acme, "m1", "a").is_none());
    assert_eq!(until(&snapshot, &Tenant::DEFAULT, "m1", "a"), 5);
    assert_eq!(until(&snapshot, &globex, "m1", "a"), 9);
    assert_eq!(snapshot.len(), 2);
}

#[test]
fn an_own_change_holds_over_a_poll_that_read_redis_before_it() {
    use crate::domain::breaker::Override;
    let view = View::default();
    let forced = OverrideUntil {
        kind: Override::ForceClosed,
        until_ms: 9_000,
    };
    // The poll begins, the override is set and shown, then the poll's
    // answer (read before the override was written) arrives.
    let seen = view.own_changes_seen();
    view.update(
        &Tenant::DEFAULT,
        "m1",
        "a",
        Change::Override(Some(forced)),
        10,
    );
    view.replace(polls(vec![index("m1", "a", 5)]), 1_000, 10, seen);
    let entry = *view.load().entry(&Tenant::DEFAULT, "m1", "a").unwrap();
    assert_eq!(entry.over, Some(forced));
    assert_eq!(entry.tripped.unwrap().open_until_ms, 5);
    // A clear made during the next poll holds over it too.
    let seen = view.own_changes_seen();
    view.update(&Tenant::DEFAULT, "m1", "a", Change::Override(None), 10);
    let mut read = index("m1", "a", 5);
    read.over = Some(forced);
    view.replace(polls(vec![read]), 2_000, 10, seen);
    assert_eq!(
        view.load().entry(&Tenant::DEFAULT, "m1", "a").unwrap().over,
        None
    );
    // A poll that began after both takes Redis's word alone.
    let seen = view.own_changes_seen();
    view.replace(polls(Vec::new()), 3_000, 10, seen);
    assert!(view.load().is_empty());
}

#[test]
fn the_view_is_stale_before_the_first_read_and_after_open_for() {
    let settings = BreakerSettings::DEFAULT;
    let view = View::default();
    let entry = Entry::default();
    assert!(!view.load().fresh(&entry, 1_000, &settings));
    view.replace(polls(Vec::new()), 1_000, 10, 0);
    let open_for = settings.open_for_ms();
    assert!(view.load().fresh(&entry, 1_000 + open_for, &settings));
    assert!(!view.load().fresh(&entry, 1_001 + open_for, &settings));
}

/// Issue 41: with MAX_TRACKED 2, a third FORCE_OPEN (and an OPEN trip)
/// is never left out of the view; only HALF-OPEN ones are.
#[test]
fn the_bound_never_drops_an_open_or_overridden_breaker() {
    use crate::domain::breaker::Override;
    let view = View::default();
    let forced = |m: &str| IndexEntry {
        tenant: Tenant::DEFAULT,
        merchant: m.into(),
        connector: "a".into(),
        tripped: None,
        over: Some(OverrideUntil {
            kind: Override::ForceOpen,
            until_ms: 9_000,
        }),
    };
    let dropped = view.replace(
        polls(vec![
            forced("m1"),
            forced("m2"),
            forced("m3"),
            index("m4", "a", 5_000),
            index("m5", "a", 500),
        ]),
        1_000,
        2,
        0,
    );
    let snapshot = view.load();
    for m in ["m1", "m2", "m3", "m4"] {
        assert!(snapshot.entry(&Tenant::DEFAULT, m, "a").is_some(), "{m}");
    }
    assert_eq!(dropped, 1, "the HALF-OPEN one past the bound");
    assert!(snapshot.entry(&Tenant::DEFAULT, "m5", "a").is_none());
}

/// Issue 41: a shard whose poll fails keeps its entries, and only its
/// own breakers go stale (fail-open) after OPEN_FOR.
#[test]
fn a_shard_that_fails_its_poll_keeps_its_entries_and_goes_stale_alone() {
    let settings = BreakerSettings::DEFAULT;
    let view = View::default();
    let (a, b) = (
        index("m1", "a", 50_000),
        index(&other_shard("m1"), "a", 50_000),
    );
    view.replace(polls(vec![a.clone(), b.clone()]), 1_000, 10, 0);
    // Later, every shard answers but a's.
    let shard_a = shard_of(&Tenant::DEFAULT, &MerchantId::parse("m1").unwrap());
    let later: Vec<_> = polls(vec![b.clone()])
        .into_iter()
        .filter(|(shard, _)| *shard != shard_a)
        .collect();
    let at = 1_000 + settings.open_for_ms();
    view.replace(later, at, 10, 0);
    let snapshot = view.load();
    let entry_a = *snapshot.entry(&Tenant::DEFAULT, "m1", "a").unwrap();
    let entry_b = *snapshot.entry(&Tenant::DEFAULT, &b.merchant, "a").unwrap();
    assert!(snapshot.fresh(&entry_a, at, &settings));
    assert!(
        !snapshot.fresh(&entry_a, at + 1, &settings),
        "a's shard is stale"
    );
    assert!(snapshot.fresh(&entry_b, at + 1, &settings), "b's is not");
    assert_eq!(snapshot.stale_shards(at + 1, &settings), 1);
}

/// A merchant in another shard than `m`'s.
fn other_shard(m: &str) -> String {
    let of = |m: &str| shard_of(&Tenant::DEFAULT, &MerchantId::parse(m).unwrap());
    (0..)
        .map(|i| format!("x{i}"))
        .find(|x| of(x) != of(m))
        .unwrap()
}
