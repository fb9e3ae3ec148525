//! The optional count arguments (bulk import): a row standing for n
//! outcomes moves a count by n, with the same floor, delete and attempt
//! rules as n single calls would; n new customers asking admission at once
//! get what n single asks, one after the other, would.

use super::*;
use crate::domain::attempts::AttemptId;

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
            let call = success_op(&key, write, times, None);
            let written = recorded(run_one(&h, call).unwrap());
            let added = start + i64::from(times);
            assert_eq!(
                written,
                Some(Recorded::Applied {
                    net_count: added,
                    pruned: 0
                })
            );
            assert_eq!(h.hash(&key)[field], added);

            let call = failure_op(&key, field, 100, None, times + 1, None);
            let outcome = recorded(run_one(&h, call).unwrap());
            let left = (added - i64::from(times + 1)).max(0);
            assert_eq!(
                outcome.unwrap(),
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
    let first = run_one(&h, success_op(&key, write, 4, None)).unwrap();
    assert_eq!(
        recorded(first),
        Some(Recorded::Applied {
            net_count: 4,
            pruned: 0
        })
    );
    let again = run_one(&h, success_op(&key, write, 4, None)).unwrap();
    assert_eq!(recorded(again), Some(Recorded::Duplicate { net_count: 4 }));
    let failure = run_one(&h, failure_op(&key, field, 100, attempt, 2, None)).unwrap();
    assert_eq!(
        recorded(failure),
        Some(Recorded::Duplicate { net_count: 4 })
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
                    .block_on(admit(&h.store, &alone, request, deadline()))
                    .unwrap();
                one_by_one += u32::from(decision.admitted);
            }
            let call = Op::Admit {
                key: &together,
                request,
                asking,
            };
            let Reply::Admitted {
                admitted: at_once, ..
            } = run_one(&h, call).unwrap()
            else {
                panic!("admit answered as a write");
            };
            prop_assert_eq!(at_once, one_by_one);
            prop_assert_eq!(h.hash(&together), h.hash(&alone));
            Ok(())
        })
        .unwrap();
}
