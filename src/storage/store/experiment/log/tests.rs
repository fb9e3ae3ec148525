//! The experiment log's frames read back as written, a batch adds up and
//! splits alike wherever it is split, and a reader counts what is not yet
//! added, once.

use super::*;

fn entry(tenant: &str, merchant: &str, day: u32, counts: [u64; 10]) -> ExperimentEntry {
    ExperimentEntry {
        tenant: if tenant.is_empty() {
            Tenant::DEFAULT
        } else {
            Tenant::parse(tenant).unwrap()
        },
        merchant: MerchantId::parse(merchant).unwrap(),
        day,
        counts: ExperimentCounts { counts },
    }
}

#[test]
fn a_frame_reads_back_as_written_without_its_empty_entries() {
    let entries = vec![
        entry("", "m1", 20261207, [1, 0, 0, 0, 2, 0, 0, 0, 0, 3]),
        entry("acme", "m_1", 20261206, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        entry("acme", "m{1}", 20261207, [0, 7, 0, 0, 0, 0, 0, 0, 0, 0]),
    ];
    let frame = log_frame(&entries).unwrap();
    assert_eq!(
        read_frame(&frame).unwrap(),
        vec![entries[0].clone(), entries[2].clone()]
    );
    assert_eq!(log_frame(&entries[1..2]), None);
    assert_eq!(log_frame(&[]), None);
}

#[test]
fn a_frame_this_service_did_not_write_is_not_read() {
    let frame = log_frame(&[entry("", "m1", 20261207, [1; 10])]).unwrap();
    for bad in [
        &b""[..],
        &[2, 0, 0][..],
        &frame[..frame.len() - 1],
        &[&frame[..], &[9]].concat()[..],
    ] {
        assert_eq!(read_frame(bad), None, "{bad:?}");
    }
    // A mask naming a field past the ten.
    let mut wide = frame.clone();
    // version, tenant (empty), merchant "m1", day
    let mask_at = 1 + 2 + 2 + 2 + 4;
    wide[mask_at + 1] = 0x04;
    assert_eq!(read_frame(&wide), None);
}

#[test]
fn a_batch_adds_up_per_merchant_day_and_every_split_is_the_same() {
    let a = entry("", "m1", 20261207, [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let b = entry("acme", "m1", 20261207, [0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    let frames = vec![
        log_frame(&[a.clone(), b.clone()]).unwrap(),
        log_frame(std::slice::from_ref(&a)).unwrap(),
        b"not ours".to_vec(),
    ];
    let batch = ExperimentBatch::of(&frames);
    assert_eq!(batch.unreadable, 1);
    assert_eq!(batch.chunks.len(), 1);
    let mut got = batch.chunks[0].clone();
    got.sort_by(|x, y| x.tenant.as_str().cmp(y.tenant.as_str()));
    let mut twice = a.clone();
    twice.counts.add(&a.counts);
    assert_eq!(got, vec![twice, b]);

    // Many merchant-days: as many chunks as CHUNK_ENTRIES asks, each
    // merchant-day in the chunk chunk_of names, whatever the frames' order.
    let many: Vec<ExperimentEntry> = (0..1000)
        .map(|i| {
            entry(
                "",
                &format!("m{i}"),
                20261207,
                [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            )
        })
        .collect();
    let forward = vec![log_frame(&many).unwrap()];
    let mut reversed = many.clone();
    reversed.reverse();
    let backward = vec![
        log_frame(&reversed[..500]).unwrap(),
        log_frame(&reversed[500..]).unwrap(),
    ];
    let (x, y) = (
        ExperimentBatch::of(&forward),
        ExperimentBatch::of(&backward),
    );
    assert_eq!(x.chunks.len(), 1000usize.div_ceil(CHUNK_ENTRIES));
    assert_eq!(x.chunks.iter().map(Vec::len).sum::<usize>(), 1000);
    for (k, (cx, cy)) in x.chunks.iter().zip(&y.chunks).enumerate() {
        let names = |c: &Vec<ExperimentEntry>| {
            let mut n: Vec<String> = c.iter().map(|e| e.merchant.as_str().to_owned()).collect();
            n.sort();
            n
        };
        assert_eq!(names(cx), names(cy), "chunk {k}");
        for e in cx {
            assert_eq!(
                chunk_of(&e.tenant, &e.merchant, e.day, x.chunks.len() as u64),
                k as u64
            );
        }
    }
}

#[test]
fn a_reader_counts_the_chunks_not_added_and_the_frames_after_the_batch() {
    let many: Vec<ExperimentEntry> = (0..600)
        .map(|i| {
            entry(
                "",
                &format!("m{i}"),
                20261207,
                [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            )
        })
        .collect();
    let frames = vec![log_frame(&many).unwrap(), log_frame(&many[..10]).unwrap()];
    let chunks = ExperimentBatch::of(&frames[..1]).chunks.len() as u64;
    assert_eq!(chunks, 3);
    for next in 0..=chunks {
        let adding = Some(Adding {
            frames: 1,
            chunks,
            next,
        });
        let (tail, unreadable) = unadded(&frames, adding, |_| true);
        assert_eq!(unreadable, 0);
        let unadded_in_batch = many
            .iter()
            .filter(|e| chunk_of(&e.tenant, &e.merchant, e.day, chunks) >= next)
            .count();
        assert_eq!(tail.len(), unadded_in_batch + 10, "next {next}");
    }
    // No batch under way: every frame.
    assert_eq!(unadded(&frames, None, |_| true).0.len(), 610);
    // What `keep` keeps.
    let one = unadded(&frames, None, |e| e.merchant.as_str() == "m3").0;
    assert_eq!(one.len(), 2);
}
