//! The bulk import's batch script against the scripts it wraps: the same
//! calls, sent one by one (RecordOutcome's path) or many per EVALSHA, give
//! the same replies and leave the same hashes; a call that fails stops only
//! itself.

use fred::prelude::KeysInterface;

use super::*;
use crate::domain::attempts::AttemptId;
use crate::storage::{CallOutcome, ScriptCall, admit_reply, failure_reply, success_reply};

/// One generated call: a success (with its create flag) or a failure on a
/// customer's combo, or an admission for the merchant.
#[derive(Debug, Clone)]
enum Op {
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

fn op() -> impl Strategy<Value = Op> {
    let write =
        (0u8..4, 0u8..5, proptest::option::of(0u8..4)).prop_map(|(who, field, attempt)| Write {
            who,
            field,
            attempt,
        });
    prop_oneof![
        (write.clone(), any::<bool>()).prop_map(|(write, create)| Op::Success(write, create)),
        write.prop_map(Op::Failure),
        (0u64..6).prop_map(|budget| Op::Admit { budget }),
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

/// `ops` one by one through the standalone scripts, on merchant `merchant`.
async fn one_by_one(store: &RedisStore, merchant: &str, ops: &[Op]) -> Vec<Answer> {
    let mut answers = Vec::new();
    for op in ops {
        answers.push(match *op {
            Op::Success(write, create) => {
                let key = write.key(merchant);
                let written = store.write_success(&key, write.success(create), deadline());
                Answer::Written(written.await.unwrap())
            }
            Op::Failure(write) => {
                let (key, combo) = (write.key(merchant), combo(write.field()));
                let written =
                    store.write_failure(&key, &combo, 100, digest(write.attempt), deadline());
                Answer::Written(Some(written.await.unwrap()))
            }
            Op::Admit { budget } => {
                let key = admission_key(merchant);
                let decided = store.admit(&key, request(budget), deadline());
                Answer::Decided(decided.await.unwrap())
            }
        });
    }
    answers
}

/// `ops` as one batch (many calls per EVALSHA), on merchant `merchant`.
async fn batched(store: &RedisStore, merchant: &str, ops: &[Op]) -> Vec<Answer> {
    let calls: Vec<ScriptCall> = ops
        .iter()
        .map(|op| match *op {
            Op::Success(write, create) => {
                store.success_call(write.key(merchant).as_str(), write.success(create), 1, None)
            }
            Op::Failure(write) => {
                let key = write.key(merchant);
                store.failure_call(
                    key.as_str(),
                    write.field(),
                    100,
                    digest(write.attempt),
                    1,
                    None,
                )
            }
            Op::Admit { budget } => {
                store.admit_call(admission_key(merchant).as_str(), request(budget), 1)
            }
        })
        .collect();
    let outcomes = store.run_batch(calls).await;
    ops.iter()
        .zip(outcomes)
        .map(|(op, outcome)| {
            let CallOutcome::Replied(reply) = outcome else {
                panic!("a batched call did not answer: {outcome:?}");
            };
            match op {
                Op::Success(..) => Answer::Written(success_reply(&reply).unwrap()),
                Op::Failure(_) => Answer::Written(Some(failure_reply(&reply).unwrap())),
                Op::Admit { .. } => Answer::Decided(admit_reply(&reply).unwrap()),
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
    let ops = proptest::collection::vec(op(), 1..200);
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
    let calls = vec![
        h.store.success_call(before.as_str(), write, 1, None),
        h.store.success_call(foreign.as_str(), write, 1, None),
        h.store.success_call(after.as_str(), write, 2, None),
    ];
    let outcomes = h.runtime.block_on(h.store.run_batch(calls));
    assert!(
        matches!(&outcomes[0], CallOutcome::Replied(reply) if reply[..2] == [1, 1]),
        "{outcomes:?}"
    );
    match &outcomes[1] {
        CallOutcome::Failed(error) => assert!(error.to_string().contains("WRONGTYPE"), "{error}"),
        other => panic!("the call on a string key answered {other:?}"),
    }
    assert!(
        matches!(&outcomes[2], CallOutcome::Replied(reply) if reply[..2] == [1, 2]),
        "{outcomes:?}"
    );
    assert_eq!(h.hash(&after)[FIELDS[0]], 2);
}

#[test]
fn a_forgotten_batch_script_is_not_run_and_loaded_again() {
    let h = Harness::new();
    let key = customer_key("m", "noscript");
    let call = || {
        h.store.success_call(
            key.as_str(),
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
    assert!(matches!(first[..], [CallOutcome::NotRun]), "{first:?}");
    assert!(h.hash(&key).is_empty());
    let again = h.runtime.block_on(h.store.run_batch(vec![call()]));
    assert!(
        matches!(&again[..], [CallOutcome::Replied(r)] if r[..2] == [1, 1]),
        "{again:?}"
    );
}
