//! The import mark in the write scripts, on real Redis: a row the mark
//! covers writes nothing, a row that writes moves it, and calls without a
//! mark (RecordOutcome's) neither count it as a combo nor leave it behind.

use super::*;
use crate::domain::attempts::is_bookkeeping;
use crate::domain::import_mark::{FileId, ImportMark, MARK_FIELD};

fn at(file: u8, row: u64) -> Option<ImportMark> {
    Some(ImportMark {
        file: FileId([file; 8]),
        row,
    })
}

fn success(field: &str, cap: u32) -> SuccessWrite<'_> {
    SuccessWrite {
        field,
        ttl_secs: 100,
        cap,
        create: true,
        attempt: None,
    }
}

fn applied(net_count: i64, pruned: u32) -> Reply {
    Reply::Recorded(Recorded::Applied { net_count, pruned })
}

fn duplicate(net_count: i64) -> Reply {
    Reply::Recorded(Recorded::Duplicate { net_count })
}

/// The combos of `key`, bookkeeping left out.
fn combos(h: &Harness, key: &str) -> HashMap<String, i64> {
    h.raw(key)
        .into_iter()
        .filter(|(field, _)| !is_bookkeeping(field))
        .map(|(field, value)| (field, String::from_utf8(value).unwrap().parse().unwrap()))
        .collect()
}

#[test]
fn rows_the_mark_covers_write_nothing_and_rows_that_write_move_it() {
    let h = Harness::new();
    h.runtime.block_on(h.store.preload_batch_script()).unwrap();
    let key = customer_key("m", "marked");
    let call = |mark| success_op(&key, success("A", 8), 1, mark);
    assert_eq!(run_one(&h, call(at(1, 5))).unwrap(), applied(1, 0));
    assert_eq!(run_one(&h, call(at(1, 5))).unwrap(), duplicate(1));
    assert_eq!(run_one(&h, call(at(1, 3))).unwrap(), duplicate(1));
    let failure = |mark| failure_op(&key, "A", 100, None, 1, mark);
    assert_eq!(run_one(&h, failure(at(1, 4))).unwrap(), duplicate(1));
    assert_eq!(run_one(&h, call(at(1, 6))).unwrap(), applied(2, 0));
    // Another file's rows are not covered, and replace the mark.
    assert_eq!(run_one(&h, call(at(2, 0))).unwrap(), applied(3, 0));
    assert_eq!(h.raw(&key)[MARK_FIELD], at(2, 0).unwrap().encode());
    // A call without a mark (RecordOutcome's) ignores it and keeps it.
    assert_eq!(run_one(&h, call(None)).unwrap(), applied(4, 0));
    assert_eq!(h.raw(&key)[MARK_FIELD], at(2, 0).unwrap().encode());
    assert!(h.ttl(&key) > 0);
}

#[test]
fn the_mark_is_no_combo_for_the_cap_and_goes_with_the_last_combo() {
    let h = Harness::new();
    h.runtime.block_on(h.store.preload_batch_script()).unwrap();
    let key = customer_key("m", "capped");
    run_one(&h, success_op(&key, success("A", 2), 3, at(1, 0))).unwrap();
    run_one(&h, success_op(&key, success("B", 2), 1, at(1, 1))).unwrap();
    // Two combos and the mark: a third combo prunes one, the lowest.
    let third = success_op(&key, success("C", 2), 1, None);
    assert_eq!(run_one(&h, third).unwrap(), applied(1, 1));
    let expected: HashMap<String, i64> = [("A".into(), 3), ("C".into(), 1)].into();
    assert_eq!(combos(&h, &key), expected);
    // Failures without a mark delete the combos; the last takes the mark.
    run_one(&h, failure_op(&key, "C", 100, None, 1, None)).unwrap();
    assert!(h.raw(&key).contains_key(MARK_FIELD));
    run_one(&h, failure_op(&key, "A", 100, None, 3, None)).unwrap();
    assert!(h.raw(&key).is_empty(), "{:?}", h.raw(&key));
}

#[test]
fn a_foreign_mark_stops_an_import_row_only() {
    let h = Harness::new();
    h.runtime.block_on(h.store.preload_batch_script()).unwrap();
    let key = customer_key("m", "foreign");
    run_one(&h, success_op(&key, success("A", 8), 1, None)).unwrap();
    let _: () = h
        .runtime
        .block_on(h.inspect.hset(key.as_str(), (MARK_FIELD, "short")))
        .unwrap();
    let row = success_op(&key, success("A", 8), 1, at(1, 0));
    assert!(matches!(
        run_one(&h, row),
        Err(StorageError::ForeignValue { .. })
    ));
    let plain = success_op(&key, success("A", 8), 1, None);
    assert_eq!(run_one(&h, plain).unwrap(), applied(2, 0));
}
