//! The bulk import's batch script against the scripts it wraps: the same
//! calls, sent one by one (RecordOutcome's path) or many per EVALSHA, give
//! the same replies and leave the same hashes; a call that fails stops only
//! itself.

use fred::prelude::KeysInterface;

use super::*;
use crate::domain::attempts::AttemptId;

/// One generated call: a success (with its create flag) or a failure on a
/// customer's combo, or an admission for the merchant.
#[derive(Debug, Clone)]
enum Call {
    Success(Write, bool),
    Failure(Write),
    Admit { budget: u64 },
}

/// Whose combo a write is on, and its attempt.
#[derive(Debug, Clone, Copy)]
struct Write {
    who: u8,
    field: u8,
    attempt: Option<u8>,
}

impl Write {
    fn key(self, merchant: &str) -> CustomerKey {
        customer_key(merchant, &format!("c{}", self.who))
    }

    fn field(self) -> &'static str {
        FIELDS[usize::from(self.field)]
    }

    fn success(self, create: bool) -> SuccessWrite<'static> {
        SuccessWrite {
            field: self.field(),
            ttl_secs: 100,
            cap: CAP,
            create,
            attempt: digest(self.attempt),
        }
    }
}

fn call() -> impl Strategy<Value = Call> {
    let write =
        (0u8..4, 0u8..5, proptest::option::of(0u8..4)).prop_map(|(who, field, attempt)| Write {
            who,
            field,
            attempt,
        });
    prop_oneof![
        (write.clone(), any::<bool>()).prop_map(|(write, create)| Call::Success(write, create)),
        write.prop_map(Call::Failure),
        (0u64..6).prop_map(|budget| Call::Admit { budget }),
    ]
}

/// Every answer as one comparable value.
#[derive(Debug, PartialEq)]
enum Answer {
    Written(Option<Recorded>),
    Decided(crate::domain::admission::Decision),
}

const FIELDS: [&str; 5] = [
    "CARD:CREDIT:a",
    "CARD:CREDIT:b",
    "CARD:DEBIT:a",
    "WALLET:X:c",
    "UPI:COLLECT:d",
];
/// Small, so that new fields prune.
const CAP: u32 = 3;
const NOW_MS: i64 = 1_000_000;

fn digest(attempt: Option<u8>) -> Option<crate::domain::attempts::AttemptDigest> {
    attempt.and_then(|a| {
        AttemptId::parse(&format!("a{a}"))
            .unwrap()
            .map(|id| id.digest())
    })
}

fn combo(field: &str) -> Combo {
    let parts: Vec<&str> = field.split(':').collect();
    Combo::new(
        &PaymentMethod::parse(parts[0]).unwrap(),
        &PaymentMethodType::parse(parts[1]).unwrap(),
        &Connector::parse(parts[2]).unwrap(),
    )
    .unwrap()
}

fn request(budget: u64) -> AdmissionRequest {
    AdmissionRequest {
        now_ms: NOW_MS,
        window_ms: 60_000,
        budget,
    }
}

/// `calls` one by one through the standalone scripts, on merchant `merchant`.
async fn one_by_one(store: &RedisStore, merchant: &str, calls: &[Call]) -> Vec<Answer> {
    let mut answers = Vec::new();
    for call in calls {
        answers.push(match *call {
            Call::Success(write, create) => {
                let key = write.key(merchant);
                let written = write_success(store, &key, write.success(create), deadline());
                Answer::Written(written.await.unwrap())
            }
            Call::Failure(write) => {
                let (key, combo) = (write.key(merchant), combo(write.field()));
                let written =
                    write_failure(store, &key, &combo, 100, digest(write.attempt), deadline());
                Answer::Written(Some(written.await.unwrap()))
            }
            Call::Admit { budget } => {
                let key = admission_key(merchant);
                let decided = admit(store, &key, request(budget), deadline());
                Answer::Decided(decided.await.unwrap())
            }
        });
    }
    answers
}

/// `calls` as one batch (many calls per EVALSHA), on merchant `merchant`.
async fn batched(store: &RedisStore, merchant: &str, calls: &[Call]) -> Vec<Answer> {
    let customer_keys: Vec<CustomerKey> = calls
        .iter()
        .map(|call| match *call {
            Call::Success(write, _) | Call::Failure(write) => write.key(merchant),
            Call::Admit { .. } => customer_key(merchant, "unused"),
        })
        .collect();
    let merchant_key = admission_key(merchant);
    let ops = calls
        .iter()
        .zip(&customer_keys)
        .map(|(call, key)| match *call {
            Call::Success(write, create) => success_op(key, write.success(create), 1, None),
            Call::Failure(write) => {
                failure_op(key, write.field(), 100, digest(write.attempt), 1, None)
            }
            Call::Admit { budget } => Op::Admit {
                key: &merchant_key,
                request: request(budget),
                asking: 1,
            },
        })
        .collect();
    let outcomes = store.run_batch(ops).await;
    calls
        .iter()
        .zip(outcomes)
        .map(|(call, outcome)| {
            let BatchOutcome::Replied(Ok(reply)) = outcome else {
                panic!("a batched call did not answer: {outcome:?}");
            };
            match call {
                Call::Success(..) | Call::Failure(_) => Answer::Written(recorded(reply)),
                Call::Admit { .. } => Answer::Decided(decision(reply)),
            }
        })
        .collect()
}

#[test]
fn a_batch_answers_and_writes_as_the_same_calls_one_by_one() {
    let h = Harness::new();
    h.runtime.block_on(async {
        h.store.preload_scripts().await.unwrap();
        h.store.preload_batch_script().await.unwrap();
    });
    let case = std::sync::atomic::AtomicU32::new(0);
    // Past the calls one script takes, so chunks and their order count too.
    let ops = proptest::collection::vec(call(), 1..200);
    runner()
        .run(&ops, |ops| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (alone, together) = (format!("alone{case}"), format!("together{case}"));
            let expected = h.runtime.block_on(one_by_one(&h.store, &alone, &ops));
            let answers = h.runtime.block_on(batched(&h.store, &together, &ops));
            prop_assert_eq!(answers, expected);
            for who in 0..4 {
                let customer = format!("c{who}");
                let left = customer_key(&alone, &customer);
                let right = customer_key(&together, &customer);
                prop_assert_eq!(h.raw(&right), h.raw(&left));
                prop_assert_eq!(h.ttl(&right) > 0, h.ttl(&left) > 0);
            }
            let (left, right) = (admission_key(&alone), admission_key(&together));
            prop_assert_eq!(h.raw(&right), h.raw(&left));
            Ok(())
        })
        .unwrap();
}

/// A customer key of merchant `m` in the same slot as `key`.
fn same_slot(key: &CustomerKey, name: &str) -> CustomerKey {
    let slot = fred::util::redis_keyslot(key.as_str().as_bytes());
    (0..)
        .map(|n| customer_key("m", &format!("{name}{n}")))
        .find(|candidate| fred::util::redis_keyslot(candidate.as_str().as_bytes()) == slot)
        .unwrap()
}

#[test]
fn a_failing_call_stops_only_itself() {
    let h = Harness::new();
    h.runtime.block_on(h.store.preload_batch_script()).unwrap();
    let foreign = customer_key("m", "foreign");
    let _: () = h
        .runtime
        .block_on(
            h.inspect
                .set(foreign.as_str(), "not a hash", None, None, false),
        )
        .unwrap();
    // In the foreign key's slot, so all three share a connection and one
    // EVALSHA.
    let before = same_slot(&foreign, "before");
    let after = same_slot(&foreign, "after");
    let write = Write {
        who: 0,
        field: 0,
        attempt: None,
    }
    .success(true);
    let ops = vec![
        success_op(&before, write, 1, None),
        success_op(&foreign, write, 1, None),
        success_op(&after, write, 2, None),
    ];
    let outcomes = h.runtime.block_on(h.store.run_batch(ops));
    let applied = |n| {
        Reply::Recorded(Recorded::Applied {
            net_count: n,
            pruned: 0,
        })
    };
    assert!(
        matches!(&outcomes[0], BatchOutcome::Replied(Ok(reply)) if *reply == applied(1)),
        "{outcomes:?}"
    );
    match &outcomes[1] {
        BatchOutcome::Failed(error) => assert!(error.to_string().contains("WRONGTYPE"), "{error}"),
        other => panic!("the call on a string key answered {other:?}"),
    }
    assert!(
        matches!(&outcomes[2], BatchOutcome::Replied(Ok(reply)) if *reply == applied(2)),
        "{outcomes:?}"
    );
    assert_eq!(h.hash(&after)[FIELDS[0]], 2);
}

#[test]
fn a_forgotten_batch_script_is_not_run_and_loaded_again() {
    let h = Harness::new();
    let key = customer_key("m", "noscript");
    let call = || {
        success_op(
            &key,
            Write {
                who: 0,
                field: 0,
                attempt: None,
            }
            .success(true),
            1,
            None,
        )
    };
    // Never loaded: NOSCRIPT, so nothing ran, and the batch loads it.
    let first = h.runtime.block_on(h.store.run_batch(vec![call()]));
    assert!(matches!(first[..], [BatchOutcome::NotRun]), "{first:?}");
    assert!(h.hash(&key).is_empty());
    let again = h.runtime.block_on(h.store.run_batch(vec![call()]));
    assert!(
        matches!(
            &again[..],
            [BatchOutcome::Replied(Ok(Reply::Recorded(
                Recorded::Applied { net_count: 1, .. }
            )))]
        ),
        "{again:?}"
    );
}
