//! The plan's steps, for every path an outcome can take.

use super::*;

fn applied(net_count: i64) -> Reply {
    Reply::Recorded(Recorded::Applied {
        net_count,
        pruned: 0,
    })
}

#[test]
fn a_known_customer_is_one_write() {
    for outcome in [Outcome::Success, Outcome::GatewayFailure] {
        let plan = Plan::start(outcome, Admission::Required);
        assert_eq!(plan.step(), Step::Write { create: false });
        let done = plan.written(applied(3)).unwrap();
        assert_eq!(
            done.step(),
            Step::Done(Recorded::Applied {
                net_count: 3,
                pruned: 0
            })
        );
    }
}

#[test]
fn a_new_customer_asks_the_guard_then_the_budget_then_creates() {
    let plan = Plan::start(Outcome::Success, Admission::Required);
    let plan = plan.written(Reply::NeedsAdmission).unwrap();
    assert_eq!(plan.step(), Step::MemoryGuard);
    let plan = plan.guarded(false);
    assert_eq!(plan.step(), Step::Budget);
    let plan = plan.admitted(true);
    assert_eq!(plan.step(), Step::Write { create: true });
    let done = plan.written(applied(1)).unwrap();
    assert!(matches!(done.step(), Step::Done(Recorded::Applied { .. })));
}

#[test]
fn a_refused_new_customer_is_done_with_nothing_written() {
    let asked = Plan::start(Outcome::Success, Admission::Required)
        .written(Reply::NeedsAdmission)
        .unwrap();
    assert_eq!(
        asked.guarded(true).step(),
        Step::Done(Recorded::NotAdmitted(AdmissionRefusal::MemoryGuard))
    );
    assert_eq!(
        asked.guarded(false).admitted(false).step(),
        Step::Done(Recorded::NotAdmitted(AdmissionRefusal::Budget))
    );
}

#[test]
fn without_admission_a_success_creates_at_once_and_a_failure_never_does() {
    let success = Plan::start(Outcome::Success, Admission::Skipped);
    assert_eq!(success.step(), Step::Write { create: true });
    let failure = Plan::start(Outcome::GatewayFailure, Admission::Skipped);
    assert_eq!(failure.step(), Step::Write { create: false });
}

#[test]
fn a_write_that_could_create_and_did_not_breaks_the_plan() {
    let creating = Plan::start(Outcome::Success, Admission::Skipped);
    assert_eq!(creating.written(Reply::NeedsAdmission), Err(NotCreated));
    let admitted = Reply::Admitted {
        admitted: 1,
        counters: crate::domain::admission::WindowCounters {
            window: 0,
            current: 1,
            previous: 0,
        },
    };
    let plain = Plan::start(Outcome::Success, Admission::Required);
    assert_eq!(plain.written(admitted), Err(NotCreated));
}
