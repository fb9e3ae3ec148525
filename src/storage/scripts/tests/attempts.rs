//! The write scripts against the domain's in-memory hash, on real Redis: a
//! random sequence of successes and failures on three combos under a cap
//! of two, with and without attempt ids, must answer and leave exactly the
//! counts and attempts `domain::customer_hash` predicts, and a
//! value the service does not write must stop a script with nothing written.

use std::collections::HashMap;

use fred::prelude::{HashesInterface, KeysInterface};
use proptest::prelude::*;

use super::{Harness, admit, customer_key, deadline, runner, write_failure, write_success};
use crate::domain::attempts::{ATTEMPTS_FIELD, AttemptDigest, AttemptId, Remembered};
use crate::domain::combo::Combo;
use crate::domain::counts::Recorded;
use crate::domain::customer_hash::{CustomerHash, Left};
use crate::domain::ids::{Connector, PaymentMethod, PaymentMethodType};
use crate::domain::keys::CustomerKey;
use crate::storage::{AdmissionRequest, StorageError, SuccessWrite};

fn combo(connector: &str) -> Combo {
    Combo::new(
        &PaymentMethod::parse("INTERAC").unwrap(),
        &PaymentMethodType::parse("RTP").unwrap(),
        &Connector::parse(connector).unwrap(),
    )
    .unwrap()
}

fn digest(id: &str) -> AttemptDigest {
    AttemptId::parse(id).unwrap().unwrap().digest()
}

/// One RecordOutcome as the scripts see it.
#[derive(Debug, Clone)]
struct Step {
    success: bool,
    connector: &'static str,
    attempt: Option<String>,
}

fn step() -> impl Strategy<Value = Step> {
    (
        any::<bool>(),
        prop::sample::select(&["X", "Y", "Z"][..]),
        prop::option::of((0..12u8).prop_map(|i| format!("attempt-{i}"))),
    )
        .prop_map(|(success, connector, attempt)| Step {
            success,
            connector,
            attempt,
        })
}

/// The cap in the random sequences: small, so that it prunes.
const CAP: u32 = 2;

/// The combo field of a step's connector, as the domain's hash names it.
fn field_of(connector: &str) -> &'static str {
    match connector {
        "X" => "INTERAC:RTP:X",
        "Y" => "INTERAC:RTP:Y",
        _ => "INTERAC:RTP:Z",
    }
}

/// What the rules say one customer's hash holds: the domain's own
/// in-memory hash (`sticky-routing replay` keeps the same one), so these
/// tests hold the scripts equal to it.
#[derive(Debug, Default)]
struct Model(Option<CustomerHash<&'static str>>);

impl Model {
    fn apply(&mut self, step: &Step) -> Recorded {
        let field = field_of(step.connector);
        let attempt = step.attempt.as_deref().map(digest);
        match (&mut self.0, step.success) {
            (None, true) => {
                self.0 = Some(CustomerHash::created(field, attempt));
                Recorded::Applied {
                    net_count: 1,
                    pruned: 0,
                }
            }
            (None, false) => Recorded::IgnoredNoHabit,
            (Some(hash), true) => hash.success(field, CAP as usize, attempt, |f| f),
            (Some(hash), false) => {
                let (recorded, left) = hash.failure(field, attempt);
                if left == Left::Gone {
                    self.0 = None;
                }
                recorded
            }
        }
    }

    fn counts(&self) -> HashMap<String, i64> {
        self.0
            .iter()
            .flat_map(|hash| hash.fields())
            .map(|(field, count)| (field.to_owned(), count))
            .collect()
    }

    fn remembered(&self) -> Vec<u8> {
        self.0
            .as_ref()
            .and_then(|hash| hash.remembered().map(Remembered::encode))
            .unwrap_or_default()
    }
}

fn run_step(h: &Harness, key: &CustomerKey, step: &Step) -> Result<Recorded, StorageError> {
    let combo = combo(step.connector);
    let attempt = step.attempt.as_deref().map(digest);
    h.runtime.block_on(async {
        if step.success {
            let write = SuccessWrite {
                field: combo.field(),
                ttl_secs: 100,
                cap: CAP,
                create: true,
                attempt,
            };
            let recorded = write_success(&h.store, key, write, deadline()).await?;
            Ok(recorded.expect("create is set"))
        } else {
            write_failure(&h.store, key, &combo, 100, attempt, deadline()).await
        }
    })
}

/// The combos and the remembered attempts, as stored.
fn stored(h: &Harness, key: &str) -> (HashMap<String, i64>, Vec<u8>) {
    let mut raw = h.raw(key);
    let attempts = raw.remove(ATTEMPTS_FIELD).unwrap_or_default();
    let counts = raw
        .into_iter()
        .map(|(f, v)| (f, String::from_utf8(v).unwrap().parse().unwrap()))
        .collect();
    (counts, attempts)
}

#[test]
fn the_scripts_remember_attempts_as_the_domain_does() {
    let h = Harness::new();
    runner()
        .run(&proptest::collection::vec(step(), 1..40), |steps| {
            let key = customer_key("prop", "attempts");
            h.arrange(&key, &HashMap::new());
            let mut model = Model::default();
            for step in &steps {
                let expected = model.apply(step);
                let got = run_step(&h, &key, step).unwrap();
                prop_assert_eq!(got, expected, "{:?}", step);
                let (counts, attempts) = stored(&h, &key);
                prop_assert_eq!(&counts, &model.counts());
                prop_assert_eq!(attempts, model.remembered());
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_duplicate_writes_nothing_not_even_the_ttl() {
    let h = Harness::new();
    let key = customer_key("m", "dup");
    let step = Step {
        success: true,
        connector: "X",
        attempt: Some("p-1".into()),
    };
    run_step(&h, &key, &step).unwrap();
    h.runtime.block_on(async {
        let _: () = h.inspect.expire(key.as_str(), 50, None).await.unwrap();
    });
    let before = h.raw(&key);
    for success in [true, false] {
        let repeat = Step {
            success,
            ..step.clone()
        };
        assert_eq!(
            run_step(&h, &key, &repeat).unwrap(),
            Recorded::Duplicate { net_count: 1 }
        );
    }
    assert_eq!(h.raw(&key), before);
    assert!(h.ttl(&key) <= 50, "the TTL was re-armed");
}

#[test]
fn the_cap_never_counts_or_prunes_the_attempts() {
    let h = Harness::new();
    let key = customer_key("m", "cap");
    for (i, connector) in ["A", "B", "C"].iter().enumerate() {
        let combo = combo(connector);
        let write = SuccessWrite {
            field: combo.field(),
            ttl_secs: 100,
            cap: 2,
            create: true,
            attempt: Some(digest(&format!("p-{i}"))),
        };
        let recorded = h
            .runtime
            .block_on(write_success(&h.store, &key, write, deadline()))
            .unwrap();
        let pruned = u32::from(i == 2);
        assert_eq!(
            recorded,
            Some(Recorded::Applied {
                net_count: 1,
                pruned
            })
        );
    }
    let (counts, attempts) = stored(&h, &key);
    assert_eq!(counts.len(), 2);
    assert_eq!(attempts.len(), 3 * 8);
}

/// A value written by someone else under the service's keys.
fn assert_foreign_value_stops_the_write(h: &Harness, field: &str, value: &[u8], step: &Step) {
    let key = customer_key("m", "foreign");
    let mut fields: Vec<(String, Vec<u8>)> = (0..2)
        .map(|i| (format!("CARD:DEBIT:{i}"), b"1".to_vec()))
        .collect();
    fields.push((field.to_owned(), value.to_vec()));
    h.runtime.block_on(async {
        let _: () = h.inspect.del(key.as_str()).await.unwrap();
        let _: () = h.inspect.hset(key.as_str(), fields).await.unwrap();
        let _: () = h.inspect.expire(key.as_str(), 50, None).await.unwrap();
    });
    let before = h.raw(&key);
    let combo = combo(step.connector);
    let write = SuccessWrite {
        field: combo.field(),
        ttl_secs: 100,
        cap: 2,
        create: false,
        attempt: step.attempt.as_deref().map(digest),
    };
    let result = if step.success {
        h.runtime
            .block_on(write_success(&h.store, &key, write, deadline()))
            .map(|r| r.unwrap())
    } else {
        run_step(h, &key, step)
    };
    assert!(
        matches!(result, Err(StorageError::ForeignValue { .. })),
        "{field}={value:?} {step:?}: {result:?}"
    );
    assert_eq!(h.raw(&key), before, "{field}={value:?} {step:?}");
    assert!(h.ttl(&key) <= 50);
}

#[test]
fn a_value_the_service_does_not_write_stops_the_script_before_any_write() {
    let h = Harness::new();
    let named = combo("X").field().to_owned();
    for success in [true, false] {
        for attempt in [None, Some("p-1".to_owned())] {
            let step = Step {
                success,
                connector: "X",
                attempt,
            };
            for value in [&b"abc"[..], b"1.5", b"0x10", b" 3"] {
                assert_foreign_value_stops_the_write(&h, &named, value, &step);
            }
            assert_foreign_value_stops_the_write(&h, ATTEMPTS_FIELD, b"short", &step);
        }
    }
    // Another combo's count is read only when the cap prunes.
    let new_combo = Step {
        success: true,
        connector: "Z",
        attempt: None,
    };
    assert_foreign_value_stops_the_write(&h, "CARD:DEBIT:9", b"lots", &new_combo);
}

#[test]
fn a_foreign_admission_counter_stops_admission_with_nothing_written() {
    let h = Harness::new();
    let key = super::admission_key("m");
    h.runtime.block_on(async {
        let _: () = h
            .inspect
            .hset(key.as_str(), [("w", "1"), ("cur", "many"), ("prev", "0")])
            .await
            .unwrap();
    });
    let before = h.raw(&key);
    let request = AdmissionRequest {
        now_ms: 1_500,
        window_ms: 1_000,
        budget: 10,
    };
    let result = h
        .runtime
        .block_on(admit(&h.store, &key, request, deadline()));
    assert!(
        matches!(result, Err(StorageError::ForeignValue { .. })),
        "{result:?}"
    );
    assert_eq!(h.raw(&key), before);
}
