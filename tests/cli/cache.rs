//! The pipeline's cache: later epochs come from it with every record once, a new order,
//! the same values; a cache file is used only when whole and made from the same shards,
//! spec and record type, and is rebuilt otherwise.

use std::fs;
use std::path::{Path, PathBuf};

use tfshard::pipeline::{Batch, CacheMode, CacheReport, Pipeline, PipelineBuilder, Values};

use crate::pipeline::{ids, shards};
use crate::{run, s, scratch};

/// Each row of each batch as (epoch, id), after checking its values against its id
/// (`x` = [id, 0.5, -1, id % 7], `y` = id % 10, as the test table has them).
fn checked_rows(batches: &[Batch]) -> Vec<(u64, u64)> {
    let rows = ids(batches);
    let mut at = 0;
    for b in batches {
        let Some(Values::Float(x)) = b.column("x").map(|c| &c.values) else {
            panic!("x is float")
        };
        let Some(Values::Int64(y)) = b.column("y").map(|c| &c.values) else {
            panic!("y is int64")
        };
        for r in 0..b.rows {
            let id = rows[at + r].1;
            assert_eq!(
                &x[4 * r..4 * r + 4],
                &[id as f32, 0.5, -1.0, (id % 7) as f32]
            );
            assert_eq!(y[r], (id % 10) as i64);
        }
        at += b.rows;
    }
    rows
}

fn run_pipeline(builder: PipelineBuilder) -> (Vec<Batch>, CacheReport) {
    let mut pipeline = builder.build().unwrap();
    let batches = pipeline
        .by_ref()
        .collect::<tfshard::Result<Vec<_>>>()
        .unwrap();
    let report = pipeline.cache().expect("a cache");
    (batches, report)
}

fn epoch(rows: &[(u64, u64)], e: u64) -> Vec<u64> {
    rows.iter().filter(|r| r.0 == e).map(|r| r.1).collect()
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort();
    v
}

fn builder(dir: &Path, seed: u64) -> PipelineBuilder {
    Pipeline::builder(vec![dir.to_path_buf()])
        .with_epochs(3)
        .with_shuffle(1000, seed)
        .with_batch(64, false)
}

#[test]
fn cached_epochs_hold_every_record_once_in_a_new_order() {
    let dir = shards("cache_epochs");
    for sequential in [false, true] {
        for deterministic in [true, false] {
            let mut b = builder(&dir, 7)
                .with_deterministic(deterministic)
                .with_cache(CacheMode::Memory);
            if sequential {
                b = b.sequential();
            }
            let (batches, report) = run_pipeline(b);
            let rows = checked_rows(&batches);
            let all: Vec<u64> = (0..5000).collect();
            for e in 0..3 {
                assert_eq!(
                    sorted(epoch(&rows, e)),
                    all,
                    "epoch {e}, sequential {sequential}"
                );
            }
            assert_ne!(
                epoch(&rows, 1),
                epoch(&rows, 2),
                "each epoch is shuffled anew"
            );
            assert_ne!(epoch(&rows, 0), epoch(&rows, 1));
            assert_eq!(report.state, "filled");
            assert_eq!((report.records, report.chunks), (5000, 79));
            assert!(report.parsed_bytes > 0);
            assert!(
                report.bytes as f64 <= 1.3 * report.parsed_bytes as f64,
                "{report:?}"
            );
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_cached_batches_threaded_or_not() {
    let dir = shards("cache_seed");
    let once = |sequential: bool, seed| {
        // (The baseline reads one file at a time.)
        let mut b = builder(&dir, seed)
            .with_interleave(1, 1)
            .with_cache(CacheMode::Memory);
        if sequential {
            b = b.sequential();
        }
        run_pipeline(b).0
    };
    let a = once(false, 3);
    assert!(a == once(false, 3), "the same batches again");
    assert!(a == once(true, 3), "the baseline gives the same batches");
    assert!(a != once(false, 4), "another seed, other batches");
}

#[test]
fn a_dropped_remainder_is_still_cached() {
    let dir = shards("cache_drop");
    let (batches, report) = run_pipeline(
        builder(&dir, 1)
            .with_batch(64, true)
            .with_cache(CacheMode::Memory),
    );
    let rows = checked_rows(&batches);
    for e in 0..3 {
        assert_eq!(
            epoch(&rows, e).len(),
            78 * 64,
            "epoch {e} drops its remainder"
        );
    }
    assert!(batches.iter().all(|b| b.rows == 64));
    // The first epoch's dropped 8 records are in the cache all the same.
    assert_eq!((report.records, report.chunks), (5000, 79));
    let later: std::collections::BTreeSet<u64> =
        rows.iter().filter(|r| r.0 > 0).map(|r| r.1).collect();
    let first: std::collections::BTreeSet<u64> =
        rows.iter().filter(|r| r.0 == 0).map(|r| r.1).collect();
    assert!(
        later.difference(&first).count() > 0,
        "records the first epoch dropped come back from the cache"
    );
}

fn hidden_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

fn file_run(dir: &Path, cache: &Path, spec_from: Option<&Path>) -> (Vec<(u64, u64)>, CacheReport) {
    let mut b = builder(dir, 5).with_cache(CacheMode::File(cache.to_path_buf()));
    if let Some(shard) = spec_from {
        // A spec without `y`.
        let spec: Vec<_> = Pipeline::builder(vec![shard.to_path_buf()])
            .build()
            .unwrap()
            .spec()
            .iter()
            .filter(|f| f.name != "y")
            .cloned()
            .collect();
        b = b.with_spec(spec);
        let (batches, report) = run_pipeline(b);
        return (ids(&batches), report);
    }
    let (batches, report) = run_pipeline(b);
    (checked_rows(&batches), report)
}

#[test]
fn a_cache_file_is_reused_only_when_whole_and_made_from_the_same_things() {
    let dir = shards("cache_file");
    let place = scratch("cache_file_place");
    let cache = place.join("epochs.cache");
    let all: Vec<u64> = (0..5000).collect();
    let check = |rows: &[(u64, u64)]| {
        for e in 0..3 {
            assert_eq!(sorted(epoch(rows, e)), all, "epoch {e}");
        }
    };

    let (rows, report) = file_run(&dir, &cache, None);
    check(&rows);
    assert_eq!((report.mode, report.state), ("file", "filled"));
    assert!(cache.is_file());
    assert!(hidden_files(&place).is_empty(), "no temporary left");
    let filled = fs::read(&cache).unwrap();
    assert_eq!(report.bytes, filled.len() as u64);

    // A second run reads no shard: every epoch from the file.
    let (rows, report) = file_run(&dir, &cache, None);
    check(&rows);
    assert_eq!(report.state, "reused");
    assert_eq!(report.records, 5000);
    assert_eq!(fs::read(&cache).unwrap(), filled, "left as it was");

    // One flipped byte anywhere (header, a chunk, the end record): rebuilt.
    for at in [20, filled.len() / 2, filled.len() - 3] {
        let mut bytes = filled.clone();
        bytes[at] ^= 0x10;
        fs::write(&cache, &bytes).unwrap();
        let (rows, report) = file_run(&dir, &cache, None);
        check(&rows);
        assert_eq!(report.state, "rebuilt", "byte {at}");
        assert!(report.reason.is_some(), "byte {at}");
        assert_eq!(
            fs::read(&cache).unwrap(),
            filled,
            "byte {at}: the same file again"
        );
    }
    // Cut short, or with bytes after its end: rebuilt.
    for bytes in [
        &filled[..filled.len() - 10],
        &[&filled[..], b"x"].concat()[..],
    ] {
        fs::write(&cache, bytes).unwrap();
        let (rows, report) = file_run(&dir, &cache, None);
        check(&rows);
        assert_eq!(report.state, "rebuilt");
        let reason = report.reason.unwrap();
        assert!(
            reason.contains("cut short") || reason.contains("after the end"),
            "{reason}"
        );
    }
    // Not a cache file at all.
    fs::write(&cache, b"hello").unwrap();
    let (_, report) = file_run(&dir, &cache, None);
    assert_eq!(report.state, "rebuilt");

    // Other shards (a subset named one by one): rebuilt, and says why.
    let shard = dir.join("data-00000-of-00010.tfrecord");
    let (batches, report) = run_pipeline(
        Pipeline::builder(vec![shard.clone()]).with_cache(CacheMode::File(cache.clone())),
    );
    assert_eq!(batches.iter().map(|b| b.rows).sum::<usize>(), 500);
    assert_eq!(report.state, "rebuilt");
    // (One shard without its manifest: the spec is inferred, without Arrow types.)
    assert_eq!(
        report.reason.as_deref(),
        Some("made from other sources and spec")
    );
    // Back to the whole set, then another spec.
    let (_, report) = file_run(&dir, &cache, None);
    assert_eq!(
        report.reason.as_deref(),
        Some("made from other sources and spec")
    );
    let (rows, report) = file_run(&dir, &cache, Some(&shard));
    assert_eq!(sorted(epoch(&rows, 2)), all);
    assert_eq!(report.state, "rebuilt");
    assert_eq!(report.reason.as_deref(), Some("made from other spec"));
    assert!(hidden_files(&place).is_empty(), "no temporary left");
}

#[test]
fn a_pipeline_left_before_its_first_epoch_ends_keeps_no_cache_file() {
    let dir = shards("cache_left");
    let place = scratch("cache_left_place");
    let cache = place.join("c");
    for sequential in [false, true] {
        let mut b = builder(&dir, 0).with_cache(CacheMode::File(cache.clone()));
        if sequential {
            b = b.sequential();
        }
        let mut pipeline = b.build().unwrap();
        pipeline.next().unwrap().unwrap();
        assert_eq!(pipeline.cache().unwrap().state, "filling");
        drop(pipeline);
        assert!(!cache.exists());
        assert!(
            hidden_files(&place).is_empty(),
            "{:?}",
            hidden_files(&place)
        );
    }
}

#[test]
fn a_cache_file_damaged_during_a_run_is_an_error_naming_it() {
    let dir = shards("cache_damaged");
    let cache = scratch("cache_damaged_place").join("c");
    run_pipeline(builder(&dir, 0).with_cache(CacheMode::File(cache.clone())));
    // Checked whole when the run starts; damaged before the epoch reads it.
    let mut pipeline = builder(&dir, 0)
        .with_cache(CacheMode::File(cache.clone()))
        .sequential()
        .build()
        .unwrap();
    let mut bytes = fs::read(&cache).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 1;
    fs::write(&cache, &bytes).unwrap();
    let err = pipeline
        .find_map(|b| b.err())
        .expect("the damaged chunk is an error");
    let text = err.to_string();
    assert!(text.contains("cache file damaged"), "{text}");
    assert!(text.contains(&cache.display().to_string()), "{text}");
    assert!(text.contains("offset"), "{text}");
}

#[test]
fn bench_reports_the_filling_and_the_cached_epochs_apart() {
    let dir = shards("cache_bench");
    let (code, out, err) = run(["bench", s(&dir), "--json", "--cache", "--epochs", "3"]);
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let sources: Vec<&str> = r["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["filling", "cache", "cache"]);
    assert_eq!(r["records"], 15_000);
    let c = &r["cache"];
    assert_eq!(
        (c["mode"].as_str(), c["state"].as_str()),
        (Some("memory"), Some("filled"))
    );
    assert_eq!(c["records"], 5000);
    assert!(c["filling_records_per_sec"].as_f64().unwrap() > 0.0);
    assert!(c["cached_records_per_sec"].as_f64().unwrap() > 0.0);

    let file: PathBuf = scratch("cache_bench_file").join("c.cache");
    let (code, out, _) = run(["bench", s(&dir), "--cache-file", s(&file), "--epochs", "2"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("epoch 0 (filling)") && out.contains("epoch 1 (cached)"),
        "{out}"
    );
    assert!(out.contains("filled in file"), "{out}");
    let (code, out, _) = run(["bench", s(&dir), "--cache-file", s(&file), "--json"]);
    assert_eq!(code, 0);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["cache"]["state"], "reused");
    assert!(r["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["source"] == "cache"));
    assert!(r["cache"].get("filling_records_per_sec").is_none());

    let (code, _, err) = run(["bench", s(&dir), "--cache", "--cache-file", s(&file)]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(["bench", s(&dir), "--cache-file", "s3://bucket/c"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("local path"), "{err}");
    let (code, out, _) = run(["bench", s(&dir), "--epochs", "2"]);
    assert_eq!(code, 0);
    assert!(!out.contains("cache"), "no cache unless asked: {out}");
}

/// SequenceExamples: `id` in the context, `frames` a feature list whose row `id` has
/// `id % 4` steps, step `j` holding `j + 1` floats `[id, j, j, ...]`.
fn sequence_shards(name: &str) -> PathBuf {
    use arrow_array::builder::{Float32Builder, ListBuilder};
    use arrow_array::{ArrayRef, Int64Array, RecordBatch};
    use std::sync::Arc;
    let dir = scratch(name);
    let mut frames = ListBuilder::new(ListBuilder::new(Float32Builder::new()));
    for id in 0..300u32 {
        for j in 0..id % 4 {
            let step = frames.values();
            step.values().append_value(id as f32);
            for _ in 0..j {
                step.values().append_value(j as f32);
            }
            step.append(true);
        }
        frames.append(true);
    }
    let batch = RecordBatch::try_from_iter(vec![
        (
            "id",
            Arc::new(Int64Array::from_iter_values(0..300)) as ArrayRef,
        ),
        ("frames", Arc::new(frames.finish()) as ArrayRef),
    ])
    .unwrap();
    let input = dir.join("seq.parquet");
    crate::convert::write_batch(&input, &batch);
    let out = dir.join("shards");
    let (code, _, err) = crate::convert_parquet(
        &input,
        &out,
        &[
            "--record-type",
            "sequence-example",
            "--max-records-per-shard",
            "40",
            "--quiet",
        ],
    );
    assert_eq!(code, 0, "{err}");
    out
}

/// (epoch, id) of every row, each row's steps checked against its id.
fn sequence_rows(batches: &[Batch]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for b in batches {
        let Some(Values::Int64(ids)) = b.column("id").map(|c| &c.values) else {
            panic!("id is int64")
        };
        let frames = b.column("frames").unwrap();
        let Values::Float(values) = &frames.values else {
            panic!("frames are floats")
        };
        let rows = frames.row_splits.as_ref().expect("records -> steps");
        let steps = frames.step_splits.as_ref().expect("steps -> values");
        assert_eq!(rows.len(), b.rows + 1);
        for (r, &id) in ids.iter().enumerate() {
            let mut want = Vec::new();
            for j in 0..id % 4 {
                let mut step = vec![id as f32];
                step.extend(std::iter::repeat_n(j as f32, j as usize));
                want.push(step);
            }
            let got: Vec<Vec<f32>> = (rows[r]..rows[r + 1])
                .map(|s| {
                    values[steps[s as usize] as usize..steps[s as usize + 1] as usize].to_vec()
                })
                .collect();
            assert_eq!(got, want, "id {id}");
            out.push((b.epoch, id as u64));
        }
    }
    out
}

#[test]
fn sequence_examples_go_through_the_pipeline_read_and_cached() {
    let dir = sequence_shards("cache_sequence");
    for sequential in [false, true] {
        for cache in [None, Some(CacheMode::Memory)] {
            let mut b = Pipeline::builder(vec![dir.clone()])
                .with_epochs(3)
                .with_shuffle(50, 9)
                .with_batch(7, false);
            if let Some(c) = cache.clone() {
                b = b.with_cache(c);
            }
            if sequential {
                b = b.sequential();
            }
            let mut pipeline = b.build().unwrap();
            let batches = pipeline
                .by_ref()
                .collect::<tfshard::Result<Vec<_>>>()
                .unwrap();
            let rows = sequence_rows(&batches);
            for e in 0..3 {
                assert_eq!(sorted(epoch(&rows, e)), (0..300).collect::<Vec<_>>());
            }
            if cache.is_some() {
                assert_eq!(pipeline.cache().unwrap().records, 300);
            }
        }
    }
    // bench reads them too.
    let (code, out, err) = run(["bench", s(&dir), "--json", "--cache"]);
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["records"], 600);
}
