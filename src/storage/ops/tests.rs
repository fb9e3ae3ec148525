//! The codec on its own: what each op sends, and how each reply reads.

use super::*;
use crate::domain::admission::AdmissionRefusal;
use crate::domain::ids::{CustomerId, MerchantId};
use crate::domain::import_mark::FileId;
use crate::domain::keys;
use crate::domain::tenant::Tenant;

fn customer() -> CustomerKey {
    keys::customer_key(
        &Tenant::DEFAULT,
        &MerchantId::parse("m1").unwrap(),
        &CustomerId::parse("c1").unwrap(),
    )
}

fn success(key: &CustomerKey, times: Times) -> Op<'_> {
    Op::Success {
        key,
        write: SuccessWrite {
            field: "CARD:CREDIT:stripe",
            ttl_secs: 100,
            cap: 8,
            create: true,
            attempt: None,
        },
        times,
    }
}

fn words(args: &[Value]) -> Vec<String> {
    args.iter()
        .map(|value| {
            value
                .as_bytes_str()
                .map_or_else(String::new, |s| s.to_string())
        })
        .collect()
}

#[test]
fn a_recordoutcome_call_sends_the_scripts_plain_form() {
    let key = customer();
    let (script, args, decode) = success(&key, Times::ONE).encode_args();
    assert_eq!(script, ScriptName::RecordSuccess);
    assert_eq!(decode, Decode::Success);
    assert_eq!(words(&args), ["CARD:CREDIT:stripe", "100", "8", "1", ""]);

    let failure = Op::Failure {
        key: &key,
        write: FailureWrite {
            field: "F",
            ttl_secs: 100,
            attempt: None,
        },
        times: Times::ONE,
    };
    assert_eq!(words(&failure.encode_args().1), ["F", "100", ""]);

    let admission = keys::admission_key(&Tenant::DEFAULT, &MerchantId::parse("m1").unwrap());
    let request = AdmissionRequest {
        now_ms: 5,
        window_ms: 10,
        budget: 3,
    };
    let admit = |asking| Op::Admit {
        key: &admission,
        request,
        asking,
    };
    assert_eq!(words(&admit(1).encode_args().1), ["5", "10", "3"]);
    assert_eq!(words(&admit(4).encode_args().1), ["5", "10", "3", "4"]);
}

#[test]
fn an_import_row_sends_its_count_and_then_its_mark() {
    let key = customer();
    let counted = success(
        &key,
        Times {
            times: 3,
            mark: None,
        },
    );
    assert_eq!(words(&counted.encode_args().1)[5..], ["3"]);
    let mark = ImportMark {
        file: FileId([1; 8]),
        row: 7,
    };
    let marked = success(
        &key,
        Times {
            times: 1,
            mark: Some(mark),
        },
    );
    let args = marked.encode_args().1;
    assert_eq!(args.len(), 7, "a mark always follows a count");
    assert_eq!(words(&args)[5], "1");
    assert_eq!(args[6].as_bytes(), Some(&mark.encode()[..]));
    assert_eq!(marked.encode().key, key.as_str());
}

#[test]
fn replies_read_as_the_scripts_document_them() {
    let applied = Decode::Success.reply(&[1, 4, 2]).unwrap();
    assert_eq!(
        applied,
        Reply::Recorded(Recorded::Applied {
            net_count: 4,
            pruned: 2
        })
    );
    assert_eq!(
        Decode::Success.reply(&[0, 0, 0]).unwrap(),
        Reply::NeedsAdmission
    );
    assert_eq!(
        Decode::Failure.reply(&[0, 0]).unwrap(),
        Reply::Recorded(Recorded::IgnoredNoHabit)
    );
    assert_eq!(
        Decode::Failure.reply(&[2, 5]).unwrap(),
        Reply::Recorded(Recorded::Duplicate { net_count: 5 })
    );
    assert!(matches!(
        Decode::Success.reply(&[-1, 0, 0]),
        Err(StorageError::ForeignValue { .. })
    ));
    assert!(matches!(
        Decode::Success.reply(&[-2, 0, 0]),
        Err(StorageError::Unavailable {
            why: NotApplied::Permission,
            ..
        })
    ));
    assert!(matches!(
        Decode::Success.reply(&[7]),
        Err(StorageError::Unexpected(_))
    ));
    // Admission: how many of those asking, never more.
    let admitted = Decode::Admit { asking: 3 }.reply(&[2, 9, 4, 1]).unwrap();
    assert_eq!(
        admitted,
        Reply::Admitted {
            admitted: 2,
            counters: WindowCounters {
                window: 9,
                current: 4,
                previous: 1
            }
        }
    );
    assert!(Decode::Admit { asking: 1 }.reply(&[2, 9, 4, 1]).is_err());
    assert!(Decode::Admit { asking: 1 }.reply(&[1, 9, -4, 1]).is_err());
    assert!(matches!(
        Decode::Admit { asking: 1 }.reply(&[-2, 0, 0, 0]),
        Err(StorageError::Unavailable {
            why: NotApplied::Permission,
            ..
        })
    ));
    let _ = AdmissionRefusal::Budget;
}
