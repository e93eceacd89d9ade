//! The reader pipeline: every record exactly once per epoch under every setting, the same
//! order for the same seed, a real shuffle, bounded memory, corruption as errors.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use tfshard::pipeline::{Batch, Pipeline, PipelineBuilder, Values};

use crate::convert::write_table;
use crate::{convert_parquet, run, s, scratch};

/// 10 shards of 500 records each, ids 0..5000 in order.
pub(crate) fn shards(name: &str) -> PathBuf {
    let dir = scratch(name);
    let input = dir.join("t.parquet");
    write_table(&input, 5000, 0, 1000);
    let out = dir.join("shards");
    let (code, _, err) =
        convert_parquet(&input, &out, &["--max-records-per-shard", "500", "--quiet"]);
    assert_eq!(code, 0, "{err}");
    out
}

/// Every `y` (id % 10) and `id` (as a number) of every batch, with its epoch.
pub(crate) fn ids(batches: &[Batch]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for b in batches {
        let Some(col) = b.column("id") else {
            panic!("no id column")
        };
        let Values::Bytes(values) = &col.values else {
            panic!("id is bytes")
        };
        for value in values.iter() {
            let text = std::str::from_utf8(value).unwrap();
            out.push((b.epoch, text.trim_start_matches("id-").parse().unwrap()));
        }
        assert_eq!(b.rows, values.len());
        let x = b.column("x").unwrap();
        assert_eq!(x.shape, Some(vec![4]));
        assert!(x.row_splits.is_none(), "a fixed shape is dense");
        assert_eq!(x.values.len(), 4 * b.rows);
    }
    out
}

/// A serialized `tf.train.Example` with these features.
fn example<const N: usize>(features: [(&str, tfshard::example::proto::Feature); N]) -> Vec<u8> {
    use prost::Message;
    use tfshard::example::proto::{Example, Features};
    let mut all = Features::default();
    for (name, feature) in features {
        all.feature.insert(name.into(), feature);
    }
    Example {
        features: Some(all),
    }
    .encode_to_vec()
}

fn collect(builder: PipelineBuilder) -> Vec<Batch> {
    builder
        .build()
        .unwrap()
        .collect::<tfshard::Result<Vec<_>>>()
        .unwrap()
}

#[test]
fn every_record_once_per_epoch_under_every_setting() {
    let dir = shards("pipeline_once");
    for sequential in [false, true] {
        for (parallelism, cycle, deterministic, shuffle, batch, drop) in [
            (1, 1, true, 0, 64, false),
            (2, 3, false, 100, 7, false),
            (3, 10, true, 1000, 100, true),
            (2, 2, false, 5000, 1, false),
        ] {
            let mut b = Pipeline::builder(vec![dir.clone()])
                .with_epochs(2)
                .with_parallelism(parallelism)
                .with_threads(3)
                .with_interleave(cycle, 2)
                .with_deterministic(deterministic)
                .with_shuffle(shuffle, 9)
                .with_shuffled_files(shuffle > 0)
                .with_batch(batch, drop);
            if sequential {
                b = b.sequential();
            }
            let batches = collect(b);
            let got = ids(&batches);
            let label = format!("seq={sequential} p={parallelism} cycle={cycle} det={deterministic} shuffle={shuffle} batch={batch} drop={drop}");
            for epoch in 0..2 {
                let mut seen: Vec<u64> = got
                    .iter()
                    .filter(|(e, _)| *e == epoch)
                    .map(|(_, id)| *id)
                    .collect();
                seen.sort_unstable();
                if drop {
                    assert_eq!(seen.len(), 5000 / batch * batch, "{label}");
                    seen.dedup();
                    assert_eq!(seen.len(), 5000 / batch * batch, "{label}: a record twice");
                } else {
                    assert_eq!(
                        seen,
                        (0..5000).collect::<Vec<u64>>(),
                        "{label}: epoch {epoch}"
                    );
                }
            }
            // Batches are full but for each epoch's last.
            let mut per_epoch: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
            for b in &batches {
                per_epoch.entry(b.epoch).or_default().push(b.rows);
            }
            for sizes in per_epoch.values() {
                let full = sizes.iter().filter(|&&r| r == batch).count();
                assert!(full + 1 >= sizes.len(), "{label}: {sizes:?}");
            }
        }
    }
}

#[test]
fn same_seed_same_order_when_deterministic() {
    let dir = shards("pipeline_order");
    let order = |seed, parallelism| {
        ids(&collect(
            Pipeline::builder(vec![dir.clone()])
                .with_shuffle(500, seed)
                .with_shuffled_files(true)
                .with_parallelism(parallelism)
                .with_threads(3)
                .with_batch(32, false),
        ))
    };
    let a = order(1, 1);
    assert_eq!(a, order(1, 3), "the same at any parallelism");
    assert_eq!(a, order(1, 2));
    assert_ne!(a, order(2, 2), "another seed, another order");
    let sequential = ids(&collect(
        Pipeline::builder(vec![dir.clone()])
            .with_shuffle(500, 1)
            .with_shuffled_files(true)
            .with_batch(32, false)
            .sequential(),
    ));
    assert_eq!(sequential.len(), a.len());
}

/// Records mixing short and long (referenced, ≥ 16 KiB) bytes values give the same
/// batches mapped, read into buffers, or gzip-compressed, in parallel or sequentially.
#[test]
fn long_values_read_the_same_every_way() {
    use std::io::Write;
    use tfshard::example::proto::Feature;
    let dir = scratch("pipeline_long_values");
    let (plain, gzip) = (dir.join("plain"), dir.join("gzip"));
    fs::create_dir_all(&plain).unwrap();
    fs::create_dir_all(&gzip).unwrap();
    for f in 0..3 {
        let mut bytes = Vec::new();
        let mut w = tfshard::tfrecord::RecordWriter::new(&mut bytes);
        for i in 0..20usize {
            let n = f * 20 + i;
            let long = vec![(n % 251) as u8; (16 << 10) + n * 37];
            let values = if n % 3 == 0 {
                vec![long, b"short".to_vec(), vec![n as u8; 40 << 10]]
            } else {
                vec![format!("v{n}").into_bytes()]
            };
            w.write_record(&example([
                ("blob", Feature::bytes(values)),
                ("n", Feature::int64(vec![n as i64])),
            ]))
            .unwrap();
        }
        fs::write(plain.join(format!("d-{f}.tfrecord")), &bytes).unwrap();
        let mut gz = flate2::write::GzEncoder::new(
            fs::File::create(gzip.join(format!("d-{f}.tfrecord.gz"))).unwrap(),
            flate2::Compression::fast(),
        );
        gz.write_all(&bytes).unwrap();
        gz.finish().unwrap();
    }
    let read = |dir: &Path, mmap: bool, sequential: bool| {
        let mut builder = Pipeline::builder(vec![dir.to_path_buf()])
            .with_shuffle(16, 3)
            .with_batch(7, false)
            .with_parallelism(2)
            .with_threads(2)
            .with_epochs(2)
            .with_mmap(mmap);
        if sequential {
            builder = builder.sequential();
        }
        collect(builder)
    };
    let want = read(&plain, true, false);
    assert_eq!(want.iter().map(|b| b.rows).sum::<usize>(), 120);
    let Values::Bytes(first) = &want[0].column("blob").unwrap().values else {
        panic!("blob is bytes")
    };
    let referenced: usize = want
        .iter()
        .map(|b| match &b.column("blob").unwrap().values {
            Values::Bytes(v) => v.referenced(),
            _ => 0,
        })
        .sum();
    assert_eq!(
        referenced,
        2 * 2 * 20,
        "every long value referenced, not copied"
    );
    assert!(first.iter().all(|v| v.len() < 100 || v.len() >= 16 << 10));
    assert_eq!(want, read(&plain, false, false), "read into buffers");
    assert_eq!(want, read(&gzip, true, false), "gzip");
    // The baseline reads one file after another: another order, the same records.
    let by_n = |batches: &[Batch]| {
        let mut out = BTreeMap::new();
        for b in batches {
            let (Values::Int64(n), Some(splits), Values::Bytes(blob)) = (
                &b.column("n").unwrap().values,
                &b.column("blob").unwrap().row_splits,
                &b.column("blob").unwrap().values,
            ) else {
                panic!("n is int64, blob variable-length bytes")
            };
            for (row, n) in n.iter().enumerate() {
                let values: Vec<Vec<u8>> = (splits[row]..splits[row + 1])
                    .map(|i| blob.get(i as usize).to_vec())
                    .collect();
                assert!(out.insert((b.epoch, *n), values).is_none());
            }
        }
        out
    };
    let want = by_n(&want);
    assert_eq!(want.len(), 120);
    assert_eq!(want, by_n(&read(&plain, true, true)), "sequential");
    assert_eq!(want, by_n(&read(&gzip, false, true)), "gzip, sequential");
}

/// Shuffle quality. The input is sorted (ids 0..5000 across 10 files in order). Without
/// shuffling, every neighbour in the output was a neighbour in the input (ids differ by
/// 1). We measure the share of output neighbours whose ids are within 10 of each other:
/// for a uniform permutation it is ~20/5000 = 0.4%; with interleaving over 10 files and a
/// 1000-record buffer it must fall below 2%. And the first batch must draw from most of
/// the files (the ids' thousands spread), not one narrow slice.
#[test]
fn a_sorted_input_ends_up_spread_out() {
    let dir = shards("pipeline_shuffle");
    let plain = ids(&collect(
        Pipeline::builder(vec![dir.clone()])
            .with_interleave(1, 1)
            .with_batch(64, false),
    ));
    let close = |v: &[(u64, u64)]| {
        v.windows(2)
            .filter(|w| w[0].1.abs_diff(w[1].1) <= 10)
            .count() as f64
            / (v.len() - 1) as f64
    };
    assert!(close(&plain) > 0.99);
    let shuffled = ids(&collect(
        Pipeline::builder(vec![dir.clone()])
            .with_shuffle(1000, 5)
            .with_shuffled_files(true)
            .with_interleave(10, 1)
            .with_batch(64, false),
    ));
    let share = close(&shuffled);
    assert!(
        share < 0.02,
        "{:.1}% of neighbours still close",
        share * 100.0
    );
    let first: std::collections::BTreeSet<u64> =
        shuffled[..64].iter().map(|(_, id)| id / 500).collect();
    assert!(
        first.len() >= 8,
        "first batch draws from only {} of 10 files",
        first.len()
    );
}

#[test]
fn corruption_surfaces_as_an_error_with_file_and_offset() {
    let dir = shards("pipeline_corrupt");
    let shard = dir.join("data-00003-of-00010.tfrecord");
    let mut bytes = fs::read(&shard).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let second = len + 16;
    bytes[second + 12 + 3] ^= 0x20; // data of record 1
    fs::write(&shard, &bytes).unwrap();
    for (sequential, mmap) in [(false, true), (true, true), (false, false), (true, false)] {
        let mut b = Pipeline::builder(vec![dir.clone()])
            .with_batch(16, false)
            .with_mmap(mmap);
        if sequential {
            b = b.sequential();
        }
        let results: Vec<_> = b.build().unwrap().collect();
        let err = results
            .iter()
            .find_map(|r| r.as_ref().err())
            .expect("the corruption is reported");
        let text = err.to_string();
        assert!(
            text.contains("data-00003-of-00010.tfrecord")
                && text.contains(&format!("record 1, offset {second}"))
                && text.contains("data CRC mismatch"),
            "{text}"
        );
        assert!(
            results.last().unwrap().is_err(),
            "iteration ends at the error"
        );
    }
    // A torn header stops the producer with a framing error.
    bytes.truncate(second + 5);
    fs::write(&shard, &bytes).unwrap();
    for mmap in [true, false] {
        let err = Pipeline::builder(vec![dir.clone()])
            .with_mmap(mmap)
            .build()
            .unwrap()
            .find_map(|r| r.err())
            .unwrap();
        let text = err.to_string();
        assert!(text.contains("truncated length"), "{text}");
        assert!(
            text.contains(&format!("record 1, offset {second}")),
            "{text}"
        );
    }
    let (code, _, stderr) = run(["bench", s(&dir), "--epochs", "1"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("data-00003-of-00010.tfrecord: record 1"),
        "{stderr}"
    );
}

/// The buffers' bytes, counted by the pipeline itself, stay within the bound
/// the options imply, for a consumer that takes no time and one that sleeps after every
/// batch (a slow training step): nothing grows with time. RSS is the benchmark's.
#[test]
fn memory_stays_bounded_with_large_records() {
    // 160 records of 1 MiB in 4 shards: 160 MiB of data, a 4-record shuffle buffer.
    let dir = scratch("pipeline_memory");
    let shards = dir.join("big");
    fs::create_dir_all(&shards).unwrap();
    use tfshard::example::proto::Feature;
    let mut record_len = 0;
    for f in 0..4 {
        let mut w = tfshard::tfrecord::RecordWriter::new(
            fs::File::create(shards.join(format!("big-{f}.tfrecord"))).unwrap(),
        );
        for i in 0..40u8 {
            let record = example([("blob", Feature::bytes(vec![vec![i; 1 << 20]]))]);
            record_len = record.len() as u64;
            w.write_record(&record).unwrap();
        }
    }
    let data = 160 * record_len;
    for mmap in [true, false] {
        for sleep_ms in [0, 15] {
            let mut pipeline = Pipeline::builder(vec![shards.clone()])
                .with_threads(2)
                .with_batch(4, false)
                .with_shuffle(4, 7)
                .with_mmap(mmap)
                .build()
                .unwrap();
            let mut records = 0;
            for batch in pipeline.by_ref() {
                records += batch.unwrap().rows;
                std::thread::sleep(std::time::Duration::from_millis(sleep_ms));
            }
            assert_eq!(records, 160);
            let m = pipeline.memory();
            let case = format!("mmap {mmap}, sleep {sleep_ms} ms: {m:?}");
            assert!(m.peak_bytes <= m.bound_bytes, "{case}");
            if mmap {
                // Values are views of the map: the buffers hold slots and views only.
                assert_eq!(m.largest_record_bytes, 0, "{case}");
                assert!(m.bound_bytes < 1 << 20, "{case}");
            } else {
                assert_eq!(m.largest_record_bytes, record_len, "{case}");
                // Shuffle 4, batch 4: at least those records were held at once.
                assert!(m.peak_bytes >= 8 * record_len, "{case}");
                // The bound is well below the data: no reader may hold whole files.
                assert!(m.bound_bytes < data * 3 / 4, "{case}");
            }
        }
    }
}

#[test]
fn bench_reports_epochs_baseline_and_input_wait() {
    let dir = shards("pipeline_bench");
    let (code, out, err) = run([
        "bench",
        s(&dir),
        "--json",
        "--compare",
        "--step-time",
        "1ms",
        "--shuffle-buffer",
        "100",
    ]);
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "records",
        "bytes",
        "seconds",
        "records_per_sec",
        "bytes_per_sec",
        "epochs",
        "input_wait_fraction",
        "baseline",
        "speedup",
    ] {
        assert!(r.get(key).is_some(), "{key}");
    }
    assert_eq!(r["records"], 10_000, "two epochs of 5000");
    assert_eq!(r["epochs"].as_array().unwrap().len(), 2);
    assert_eq!(r["baseline"]["records"], 10_000);
    assert_eq!(r["baseline"]["parallelism"], 0);
    let (code, out, _) = run(["bench", s(&dir), "--epochs", "1"]);
    assert_eq!(code, 0);
    assert!(out.contains("epoch 0 (cold)"), "{out}");
    let (code, _, _) = run(["bench", s(&dir), "--parallelism", "0"]);
    assert_eq!(code, 2);
    let _ = Path::new("");
}

/// A pipeline stopped by an error, or dropped half-way, ends its threads (idle workers
/// waiting for a credit included) instead of hanging.
#[test]
fn a_stopped_pipeline_ends_its_threads() {
    let dir = shards("pipeline_stop");
    let shard = dir.join("data-00009-of-00010.tfrecord");
    let mut bytes = fs::read(&shard).unwrap();
    let last = bytes.len() - 5;
    bytes[last] ^= 1;
    fs::write(&shard, &bytes).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let dir2 = dir.clone();
    std::thread::spawn(move || {
        for prefetch in [1, 2, 8] {
            let builder = || {
                Pipeline::builder(vec![dir2.clone()])
                    .with_threads(3)
                    .with_prefetch(prefetch)
                    .with_batch(8, false)
            };
            let results: Vec<_> = builder().build().unwrap().collect();
            assert!(results.last().unwrap().is_err());
            let mut half = builder().build().unwrap();
            half.next().unwrap().unwrap();
            drop(half);
        }
        tx.send(()).unwrap();
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the pipelines ended within a minute");
}

/// `AUTOTUNE`: the prefetch depth starts at two batches per worker and may grow to eight
/// per worker, whatever the consumer does; a depth set by hand never moves. (When it
/// grows is a matter of timing: the unit tests in `pipeline/prefetch.rs` play the
/// workers' side and check each step.)
#[test]
fn prefetch_depth_stays_within_its_settings() {
    let dir = shards("pipeline_autotune");
    let builder = || {
        Pipeline::builder(vec![dir.clone()])
            .with_threads(2)
            .with_batch(16, false)
    };
    for sleep_ms in [0, 2] {
        let mut auto = builder().build().unwrap();
        let start = auto.tuned();
        assert_eq!((start.parallelism, start.prefetch), (1, 2));
        assert_eq!(start.max_prefetch, 8);
        for _ in 0..40 {
            auto.next().unwrap().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(sleep_ms));
            assert!((2..=8).contains(&auto.tuned().prefetch));
        }
    }
    let mut fixed = builder().with_prefetch(3).build().unwrap();
    for batch in fixed.by_ref() {
        batch.unwrap();
    }
    assert_eq!((fixed.tuned().prefetch, fixed.tuned().max_prefetch), (3, 3));
}
