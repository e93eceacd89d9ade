//! `--resume` after a kill or an interrupt, on disk.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{root, run, scratch, wait_for_failpoint};

fn args(out: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "convert".into(),
        "parquet".into(),
        root().join("testdata/small.parquet").display().to_string(),
        "-o".into(),
        out.display().to_string(),
        "--target-shard-size".into(),
        "64KiB".into(),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// Runs a conversion with failure points; returns the exit code.
fn killed(out: &Path, extra: &[&str], failpoints: &str) -> i32 {
    Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(args(out, extra))
        .env("TFSHARD_FAILPOINTS", failpoints)
        .status()
        .unwrap()
        .code()
        .unwrap_or(-1)
}

/// Every shard file and its bytes, and the manifest without its timestamp.
fn output(dir: &Path) -> (Vec<(String, Vec<u8>)>, serde_json::Value) {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .filter(|(n, _)| !n.ends_with(".manifest.json"))
        .collect();
    files.sort();
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("data.manifest.json")).unwrap()).unwrap();
    m.as_object_mut().unwrap().remove("created");
    (files, m)
}

fn reference(name: &str) -> (Vec<(String, Vec<u8>)>, serde_json::Value) {
    let out = scratch(&format!("resume-reference-{name}"));
    let (code, _, err) = run(args(&out, &[]));
    assert_eq!(code, 0, "{err}");
    let o = output(&out);
    assert!(o.0.len() > 3, "several shards");
    crate::in_order_sources(&o.1);
    o
}

fn tmp_shard(out: &Path, i: usize) -> PathBuf {
    out.join(".data.tfshard-tmp")
        .join(format!("{i:05}.tfrecord"))
}

#[test]
fn a_kill_between_shards_then_resume_reuses_the_finished_ones() {
    let want = reference("resume-between");
    let out = scratch("resume-between");
    assert_eq!(killed(&out, &["--resume"], "shard:journaled=exit"), 137);
    let first = std::fs::metadata(tmp_shard(&out, 0)).unwrap().ino();
    // The next shard, cut short as a kill mid-write leaves it.
    std::fs::write(tmp_shard(&out, 1), b"partial").unwrap();
    let (code, stdout, err) = run(args(&out, &["--resume", "--json"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(output(&out), want);
    // It says what it reused (the one finished shard), and a plain run does not.
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // (The first shard ends inside the first row group: no checkpoint to restart from.)
    let reused = serde_json::json!({"shards": 1, "bytes": want.0[0].1.len(), "unread_records": 0});
    assert_eq!(summary["reused"], reused, "{summary}");
    let placed = std::fs::metadata(out.join(want.0[0].0.as_str()))
        .unwrap()
        .ino();
    assert_eq!(placed, first, "the finished shard was written again");
    assert!(
        !out.join(".data.tfshard-tmp").exists(),
        "the journal outlived the commit"
    );
}

/// A rerun restarts its input after the last row group that the reused shards
/// hold whole (a checkpoint journaled with them) instead of reading it again, and still
/// writes the same bytes.
#[test]
fn a_resumed_run_skips_the_row_groups_its_reused_shards_hold() {
    let want = reference("resume-skip");
    // small.parquet: 2 row groups of 1000 rows. The first shard that ends at or past row
    // 1000 is the first journaled with the end of row group 0 as its checkpoint.
    let mut end = 0;
    let first = want.1["shards"]
        .as_array()
        .unwrap()
        .iter()
        .position(|s| {
            end += s["records"].as_u64().unwrap();
            end >= 1000
        })
        .unwrap();
    assert!(first + 1 < want.0.len(), "a shard after it");
    for threads in ["1", "2"] {
        let out = scratch(&format!("resume-skip-{threads}"));
        let extra = ["--resume", "--threads", threads];
        let kill = format!("shard:journaled=exit@{}", first + 1);
        assert_eq!(killed(&out, &extra, &kill), 137);
        let (code, stdout, err) = run(args(&out, &[&extra[..], &["--json"]].concat()));
        assert_eq!(code, 0, "{err}");
        assert_eq!(output(&out), want, "--threads {threads}");
        let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(summary["reused"]["shards"], first as u64 + 1, "{summary}");
        assert_eq!(summary["reused"]["unread_records"], 1000, "{summary}");
    }
}

#[test]
fn a_kill_during_the_commit_then_resume() {
    let want = reference("resume-commit");
    let out = scratch("resume-commit");
    assert_eq!(killed(&out, &["--resume"], "publish:placed=exit"), 137);
    assert!(!out.join("data.manifest.json").exists());
    let (code, _, err) = run(args(&out, &["--resume", "--overwrite"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(output(&out), want);
}

#[test]
fn a_damaged_finished_shard_is_written_again() {
    let want = reference("resume-damaged");
    let out = scratch("resume-damaged");
    assert_eq!(killed(&out, &["--resume"], "shard:journaled=exit"), 137);
    let path = tmp_shard(&out, 0);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let (code, stdout, err) = run(args(&out, &["--resume"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(output(&out), want);
    assert!(stdout.contains("reused 0 shards (0.0 MB)"), "{stdout}");
}

#[test]
fn sigterm_with_resume_keeps_the_journal() {
    let want = reference("resume-sigterm");
    let out = scratch("resume-sigterm");
    let gate = scratch("resume-sigterm-gate").join("go");
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(args(&out, &["--resume"]))
        .env(
            "TFSHARD_FAILPOINTS",
            format!("shard:journaled=wait:{}", gate.display()),
        )
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_failpoint(&mut child, &gate, "a shard was journaled");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    std::fs::write(&gate, "").unwrap();
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(143), "{err}");
    assert!(err.contains("rerun with --resume"), "{err}");
    assert!(out.join(".data.tfshard-tmp/journal.json").exists());
    let (code, _, err) = run(args(&out, &["--resume"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(output(&out), want);
    // Without --resume, an interrupt removes everything, as before.
}

#[test]
fn resume_with_other_flags_names_the_difference() {
    let out = scratch("resume-changed");
    assert_eq!(killed(&out, &["--resume"], "shard:journaled=exit"), 137);
    let mut changed = args(&out, &["--resume"]);
    let size = changed.iter().position(|a| a == "64KiB").unwrap();
    changed[size] = "32KiB".into();
    let (code, _, err) = run(changed);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("target_shard_size") && err.contains("65536") && err.contains("32768"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // Another input under the same name: named too.
    let moved = scratch("resume-changed-input");
    std::fs::copy(
        root().join("testdata/small.parquet"),
        moved.join("t.parquet"),
    )
    .unwrap();
    let other = scratch("resume-changed-input-out");
    let mut a = args(&other, &["--resume"]);
    a[2] = moved.join("t.parquet").display().to_string();
    assert_eq!(
        Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
            .args(&a)
            .env("TFSHARD_FAILPOINTS", "shard:journaled=exit")
            .status()
            .unwrap()
            .code(),
        Some(137)
    );
    std::fs::copy(
        root().join("testdata/hive/year=2020/city=plain/part-0.parquet"),
        moved.join("t.parquet"),
    )
    .unwrap();
    let (code, _, err) = run(&a);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cannot resume") && err.contains("inputs"),
        "{err}"
    );
    // A run without --resume starts over.
    let (code, _, err) = run(args(&out, &[]));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn gzip_shards_and_workers_resume_too() {
    // Compressed shards.
    let gz = ["--compression", "gzip"];
    let reference_dir = scratch("resume-gzip-reference");
    let (code, _, err) = run(args(&reference_dir, &gz));
    assert_eq!(code, 0, "{err}");
    let out = scratch("resume-gzip");
    assert_eq!(
        killed(
            &out,
            &[&gz[..], &["--resume"]].concat(),
            "shard:journaled=exit"
        ),
        137
    );
    let (code, _, err) = run(args(&out, &[&gz[..], &["--resume"]].concat()));
    assert_eq!(code, 0, "{err}");
    assert_eq!(output(&out), output(&reference_dir));

    // A worker killed after its first shard, resumed, then finalized.
    let one = scratch("resume-workers-one");
    let (code, _, err) = run(args(&one, &[]));
    assert_eq!(code, 0, "{err}");
    let many = scratch("resume-workers");
    let w = |i: &'static str| ["--num-workers", "2", "--worker-index", i, "--resume"];
    assert_eq!(killed(&many, &w("0"), "shard:journaled=exit"), 137);
    for i in ["0", "1"] {
        let (code, _, err) = run(args(&many, &w(i)));
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = run(["finalize".as_ref(), many.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        crate::records_in_order(&many, "data"),
        crate::records_in_order(&one, "data")
    );
}
