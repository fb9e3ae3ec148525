//! The optional count arguments (bulk import): a row standing for n
//! outcomes moves a count by n, with the same floor, delete and attempt
//! rules as n single calls would; n new customers asking admission at once
//! get what n single asks, one after the other, would.

use super::*;
use crate::domain::attempts::AttemptId;
use crate::storage::{admitted_of, failure_reply, success_reply};

#[test]
fn a_count_moves_the_stored_count_by_that_much_and_floors_at_deletion() {
    let h = Harness::new();
    h.runtime.block_on(h.store.preload_batch_script()).unwrap();
    let key = customer_key("m", "counted");
    let field = "CARD:CREDIT:stripe";
    for start in 0i64..5 {
        for times in [1u32, 2, 3, 7] {
            let mut fields = HashMap::from([("CARD:DEBIT:other".to_owned(), 9)]);
            if start > 0 {
                fields.insert(field.to_owned(), start);
            }
            h.arrange(&key, &fields);
            let write = SuccessWrite {
                field,
                ttl_secs: 100,
                cap: 30,
                create: true,
                attempt: None,
            };
            let call = h.store.success_call(key.as_str(), write, times, None);
            let outcome = run_one(&h, call);
            let recorded = success_reply(&outcome).unwrap();
            let added = start + i64::from(times);
            assert_eq!(
                recorded,
                Some(Recorded::Applied {
                    net_count: added,
                    pruned: 0
                })
            );
            assert_eq!(h.hash(&key)[field], added);

            let call = h
                .store
                .failure_call(key.as_str(), field, 100, None, times + 1, None);
            let outcome = run_one(&h, call);
            let left = (added - i64::from(times + 1)).max(0);
            assert_eq!(
                failure_reply(&outcome).unwrap(),
                Recorded::Applied {
                    net_count: left,
                    pruned: 0
                }
            );
            assert_eq!(h.hash(&key).get(field).copied().unwrap_or(0), left);
            assert!(h.ttl(&key) > 0);
        }
    }
}

#[test]
fn a_counted_row_with_an_attempt_is_one_attempt() {
    let h = Harness::new();
    h.runtime.block_on(h.store.preload_batch_script()).unwrap();
    let key = customer_key("m", "attempted");
    let field = "CARD:CREDIT:stripe";
    let attempt = AttemptId::parse("att-1").unwrap().map(|a| a.digest());
    let write = SuccessWrite {
        field,
        ttl_secs: 100,
        cap: 30,
        create: true,
        attempt,
    };
    let first = run_one(&h, h.store.success_call(key.as_str(), write, 4, None));
    assert_eq!(
        success_reply(&first).unwrap(),
        Some(Recorded::Applied {
            net_count: 4,
            pruned: 0
        })
    );
    let again = run_one(&h, h.store.success_call(key.as_str(), write, 4, None));
    assert_eq!(
        success_reply(&again).unwrap(),
        Some(Recorded::Duplicate { net_count: 4 })
    );
    let failure = run_one(
        &h,
        h.store
            .failure_call(key.as_str(), field, 100, attempt, 2, None),
    );
    assert_eq!(
        failure_reply(&failure).unwrap(),
        Recorded::Duplicate { net_count: 4 }
    );
    // raw: the attempts field beside it is binary.
    assert_eq!(h.raw(&key)[field], b"4".to_vec());
}

#[test]
fn asking_admission_for_n_at_once_is_n_asks_one_after_the_other() {
    let h = Harness::new();
    h.runtime.block_on(h.store.preload_batch_script()).unwrap();
    let inputs = (
        proptest::option::of((0i64..6, 0u64..6, 0u64..6)),
        0i64..6_000,
        1i64..2_000,
        0u64..12,
        1u32..10,
    );
    runner()
        .run(&inputs, |(stored, now, window, budget, asking)| {
            let fields: HashMap<String, i64> =
                stored.map_or_else(HashMap::new, |(w, cur, prev): (i64, u64, u64)| {
                    HashMap::from([
                        ("w".into(), w),
                        ("cur".into(), cur as i64),
                        ("prev".into(), prev as i64),
                    ])
                });
            let request = AdmissionRequest {
                now_ms: now,
                window_ms: window,
                budget,
            };
            let (alone, together) = (admission_key("alone"), admission_key("together"));
            h.arrange(&alone, &fields);
            h.arrange(&together, &fields);
            let mut one_by_one = 0;
            for _ in 0..asking {
                let decision = h
                    .runtime
                    .block_on(h.store.admit(&alone, request, deadline()))
                    .unwrap();
                one_by_one += u32::from(decision.admitted);
            }
            let call = h.store.admit_call(together.as_str(), request, asking);
            let at_once = admitted_of(&run_one(&h, call), asking).unwrap();
            prop_assert_eq!(at_once, one_by_one);
            prop_assert_eq!(h.hash(&together), h.hash(&alone));
            Ok(())
        })
        .unwrap();
}
