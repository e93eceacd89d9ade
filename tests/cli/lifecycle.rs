//! A set's lifecycle, the defects the model-based histories (scripts/model_appends.py)
//! and a reading of the code found, one regression test each: what identifies an input,
//! claims, splits as one set, `finalize` and `compact` as writers of the set, pinned
//! manifests.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::append::listed;
use crate::convert::write_table;
use crate::{read_manifest, run, s, scratch, wait_for_failpoint};

fn convert(table: &Path, out: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["convert", "parquet", s(table), "-o", s(out), "--json"];
    args.extend_from_slice(&["--max-records-per-shard", "100"]);
    args.extend_from_slice(extra);
    let (code, stdout, err) = run(args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&stdout).unwrap()
}

/// The live records equal a full conversion's, and verify passes (with `--deep`).
fn same_as_full(table: &Path, out: &Path, extra: &[&str], prefixes: &[&str]) {
    let full = scratch(&format!(
        "{}-full",
        out.file_name().unwrap().to_string_lossy()
    ));
    let mut args = vec!["--overwrite"];
    args.extend_from_slice(extra);
    convert(table, &full, &args);
    for p in prefixes {
        let sorted = |dir: &Path| {
            let m = read_manifest(dir, p);
            let mut all: Vec<Vec<u8>> = Vec::new();
            for shard in m["shards"].as_array().unwrap() {
                let bytes = fs::read(dir.join(shard["file"].as_str().unwrap())).unwrap();
                let mut at = 0;
                while at < bytes.len() {
                    let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
                    all.push(bytes[at + 12..at + 12 + len].to_vec());
                    at += 16 + len;
                }
            }
            all.sort();
            all
        };
        assert_eq!(sorted(out), sorted(&full), "{p}: the live records");
    }
    let (code, stdout, err) = run(["verify", s(out), "--deep"]);
    assert_eq!(code, 0, "{stdout}{err}");
}

/// A folder of `files` Parquet files of 50 rows, written now (no wait for the clock).
fn folder(name: &str, files: usize) -> PathBuf {
    let dir = scratch(name);
    for f in 0..files {
        write_table(&dir.join(format!("part-{f}.parquet")), 50, f * 1000, 50);
    }
    dir
}

/// A set converted from `files` files of 50 rows, then one more file in the folder: (the
/// folder, the set).
fn grown(name: &str, files: usize) -> (PathBuf, PathBuf) {
    let t = folder(name, files);
    let out = scratch(&format!("{name}-out"));
    convert(&t, &out, &[]);
    write_table(
        &t.join(format!("part-{files}.parquet")),
        50,
        files * 1000,
        50,
    );
    (t, out)
}

/// `convert parquet --append` of `t` into `out`, stopped at `convert:written` (its shards
/// written, nothing published) until the gate opens: the run, and the gate.
fn paused_append(t: &Path, out: &Path, name: &str) -> (std::process::Child, PathBuf) {
    let gate = scratch(name).join("go");
    let mut append = Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(["convert", "parquet", s(t), "-o", s(out), "--append"])
        .args(["--max-records-per-shard", "100"])
        .env(
            "TFSHARD_FAILPOINTS",
            format!("convert:written=wait:{}", gate.display()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_failpoint(&mut append, &gate, "the append wrote its shards");
    (append, gate)
}

/// Regression: a local file counted as changed when modified in or after the second
/// its set was published (the manifest's `created`), so a table converted right after it
/// was written paid a whole conversion on its next append (a streaming job's table, every
/// run). Inputs are told by identity now (size, mtime to the nanosecond, inode, ctime):
/// converted in the same second, an added file appends it alone; a file rewritten in
/// place with its old mtime set back is still a change.
#[test]
fn a_table_converted_in_the_second_it_was_written_appends_only_what_changed() {
    let t = folder("identity-table", 3);
    let out = scratch("identity-out");
    convert(&t, &out, &[]);
    write_table(&t.join("part-3.parquet"), 50, 3000, 50);
    let summary = convert(&t, &out, &["--append"]);
    assert_eq!(summary["retired"], 0, "{summary}");
    assert_eq!(summary["records"], 50, "only the new file: {summary}");
    // Rewritten in place, as many rows (same size), the old mtime set back: its ctime
    // tells.
    let path = t.join("part-1.parquet");
    let old = fs::metadata(&path).unwrap().modified().unwrap();
    let scratch_copy = scratch("identity-rewrite").join("p.parquet");
    write_table(&scratch_copy, 50, 7000, 50);
    let bytes = fs::read(&scratch_copy).unwrap();
    assert_eq!(
        bytes.len() as u64,
        fs::metadata(&path).unwrap().len(),
        "same size"
    );
    {
        use std::io::{Seek, Write};
        let mut f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(std::io::SeekFrom::Start(0)).unwrap();
        f.write_all(&bytes).unwrap();
        f.set_modified(old).unwrap();
    }
    let summary = convert(&t, &out, &["--append"]);
    assert_eq!(summary["up_to_date"], false, "{summary}");
    assert_eq!(
        summary["retired"], 1,
        "the shard of part-1 alone: {summary}"
    );
    same_as_full(&t, &out, &[], &["data"]);
}

/// Regression: `finalize` took the live set's manifest for its own published plan when
/// both were made in the same second (it compared their `created`), and deleted the
/// workers' parts without publishing them: an append by workers vanished. The plan is
/// recorded, the live manifest given the plan's `created` (the same second), and
/// `finalize` run again: it publishes.
#[test]
fn finalize_publishes_a_plan_made_in_the_second_the_set_was() {
    let (t, out) = grown("finalize-second", 2);
    for i in ["0", "1"] {
        convert(
            &t,
            &out,
            &["--append", "--num-workers", "2", "--worker-index", i],
        );
    }
    let killed = crate::tfshard()
        .args(["finalize", s(&out)])
        .env("TFSHARD_FAILPOINTS", "finalize:planned=exit")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), Some(137));
    let plan: Value =
        serde_json::from_slice(&fs::read(out.join(".data.tfshard-parts/finalize.json")).unwrap())
            .unwrap();
    let mut live = read_manifest(&out, "data");
    live["created"] = plan["manifest"]["created"].clone();
    fs::write(out.join("data.manifest.json"), live.to_string()).unwrap();
    let (code, stdout, err) = run(["finalize", s(&out), "--json"]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["records"], 150, "{report}");
    let m = read_manifest(&out, "data");
    assert_eq!(m["records"], 150);
    assert_eq!(m["generations"].as_array().unwrap().len(), 2);
    same_as_full(&t, &out, &[], &["data"]);
}

/// Regression: an append killed with `--resume` once it had published left its journal;
/// the next `--resume` run (another generation) stopped on it ("the earlier run differs").
/// A journal of a generation the set holds is superseded: the run starts afresh.
#[test]
fn a_resumed_append_after_one_killed_once_published_starts_afresh() {
    let (t, out) = grown("resume-published", 2);
    let killed = crate::tfshard()
        .args([
            "convert",
            "parquet",
            s(&t),
            "-o",
            s(&out),
            "--append",
            "--resume",
        ])
        .args(["--max-records-per-shard", "100"])
        .env("TFSHARD_FAILPOINTS", "publish:published=exit")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), Some(137));
    assert_eq!(read_manifest(&out, "data")["records"], 150, "published");
    write_table(&t.join("part-3.parquet"), 50, 3000, 50);
    let summary = convert(&t, &out, &["--append", "--resume"]);
    assert_eq!(summary["generation"], 2, "{summary}");
    same_as_full(&t, &out, &[], &["data"]);
}

const SPLIT: [&str; 4] = ["--split", "a=0.5,b=0.5", "--split-key", "id"];

/// Splits are one set: an append killed between its splits' manifests leaves one split a
/// generation ahead; the next run completes the other from its pinned manifest (written
/// before any manifest) before it plans, and never plans against one split alone.
#[test]
fn an_append_killed_between_its_splits_manifests_is_completed_by_the_next_run() {
    let t = folder("split-lag", 2);
    let out = scratch("split-lag-out");
    convert(&t, &out, &SPLIT);
    write_table(&t.join("part-2.parquet"), 50, 2000, 50);
    let mut args = vec!["convert", "parquet", s(&t), "-o", s(&out), "--append"];
    args.extend_from_slice(&SPLIT);
    args.extend_from_slice(&["--max-records-per-shard", "100"]);
    let killed = crate::tfshard()
        .args(&args)
        .env("TFSHARD_FAILPOINTS", "publish:manifest=exit@1")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), Some(137));
    let generation = |p: &str| {
        read_manifest(&out, p)["generations"]
            .as_array()
            .map_or(0, Vec::len)
    };
    assert_ne!(generation("a"), generation("b"), "one split ahead");
    let mut again = SPLIT.to_vec();
    again.push("--append");
    let summary = convert(&t, &out, &again);
    assert_eq!(summary["up_to_date"], true, "{summary}");
    assert_eq!(generation("a"), generation("b"), "completed");
    same_as_full(&t, &out, &SPLIT, &["a", "b"]);
    write_table(&t.join("part-3.parquet"), 50, 3000, 50);
    convert(&t, &out, &again);
    same_as_full(&t, &out, &SPLIT, &["a", "b"]);
}

/// Regression: `compact --prefix a` of a split set moved split `a` a generation ahead
/// of `b`. A split set is compacted together, as one generation.
#[test]
fn compact_keeps_a_split_set_at_one_generation() {
    let t = folder("split-compact", 1);
    let out = scratch("split-compact-out");
    convert(&t, &out, &SPLIT);
    let mut again = SPLIT.to_vec();
    again.push("--append");
    for f in 1..4 {
        write_table(&t.join(format!("part-{f}.parquet")), 5, f * 1000, 5);
        convert(&t, &out, &again);
    }
    let (code, stdout, err) = run(["compact", s(&out), "--prefix", "a", "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert!(summary["replaced"].as_u64().unwrap() > 1, "{summary}");
    let newest = |p: &str| {
        let m = read_manifest(&out, p);
        m["generations"].as_array().unwrap().last().unwrap()["generation"].clone()
    };
    assert_eq!(newest("a"), newest("b"));
    same_as_full(&t, &out, &SPLIT, &["a", "b"]);
    write_table(&t.join("part-4.parquet"), 5, 4000, 5);
    convert(&t, &out, &again);
    same_as_full(&t, &out, &SPLIT, &["a", "b"]);
}

/// `--overwrite` respects an append's claim: while an append publishes, a run that
/// would replace the set exits 1 and touches nothing.
#[test]
fn overwrite_waits_for_an_appends_claim() {
    let (t, out) = grown("overwrite-claim", 2);
    let (append, gate) = paused_append(&t, &out, "overwrite-claim-gate");
    let before = listed(&out);
    let (code, _, err) = run(["convert", "parquet", s(&t), "-o", s(&out), "--overwrite"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("another run is publishing to this output"),
        "{err}"
    );
    assert_eq!(listed(&out), before, "nothing touched");
    fs::write(&gate, "").unwrap();
    let done = append.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    same_as_full(&t, &out, &[], &["data"]);
}

/// A pinned manifest that cannot be read (a store's transient error; here, a folder in
/// its place) is never taken as gone: the append fails naming it, and nothing of that
/// generation is deleted.
#[test]
fn a_pinned_manifest_that_cannot_be_read_is_never_taken_as_gone() {
    let t = folder("pinned-unreadable", 1);
    let out = scratch("pinned-unreadable-out");
    convert(&t, &out, &[]);
    write_table(&t.join("part-1.parquet"), 50, 1000, 50);
    convert(&t, &out, &["--append"]);
    let pinned = out.join("data.manifest-g00001.json");
    let bytes = fs::read(&pinned).unwrap();
    fs::remove_file(&pinned).unwrap();
    fs::create_dir(&pinned).unwrap();
    // Rewritten: generation 1's shard is retired, which its pinned manifest lists.
    write_table(&t.join("part-1.parquet"), 60, 5000, 60);
    let before = listed(&out);
    let mut args = vec!["convert", "parquet", s(&t), "-o", s(&out), "--append"];
    args.extend_from_slice(&["--max-records-per-shard", "100"]);
    let (code, _, err) = run(args.iter().copied());
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("data.manifest-g00001.json"), "{err}");
    assert_eq!(listed(&out), before, "nothing deleted");
    assert!(pinned.is_dir());
    fs::remove_dir(&pinned).unwrap();
    fs::write(&pinned, bytes).unwrap();
    let (code, _, err) = run(args.iter().copied());
    assert_eq!(code, 0, "{err}");
    same_as_full(&t, &out, &[], &["data"]);
}

const WRITE: &str = "import sys, pyarrow as pa
from deltalake import write_deltalake
first, n, mode = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
write_deltalake(sys.argv[1], pa.table({'id': pa.array(range(first, first + n), pa.int64())}), mode=mode)";

fn write_delta(table: &Path, first: u64, n: u64, mode: &str) -> Option<()> {
    let python = crate::delta::python()?;
    let out = Command::new(python)
        .args([
            "-c",
            WRITE,
            s(table),
            &first.to_string(),
            &n.to_string(),
            mode,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(())
}

fn delta(table: &Path, out: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["convert", "delta", s(table), "-o", s(out), "--json"];
    args.extend_from_slice(&["--max-records-per-shard", "100"]);
    args.extend_from_slice(extra);
    let (code, stdout, err) = run(args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&stdout).unwrap()
}

/// Regression (the issue's): a Delta table written by deltalake and converted within the
/// same second, then appended 1%: every shard was retired (its data files counted as
/// modified since the set). A Delta data file is told by the log's record of it.
#[test]
fn a_delta_table_converted_right_after_its_commit_appends_what_is_new() {
    let table = scratch("delta-second");
    let _ = fs::remove_dir_all(&table);
    let Some(()) = write_delta(&table, 0, 1000, "append") else {
        eprintln!("skipped: no deltalake venv (run scripts/delta_venv.sh)");
        return;
    };
    let out = scratch("delta-second-out");
    delta(&table, &out, &[]);
    write_delta(&table, 1000, 10, "append");
    let summary = delta(&table, &out, &["--append"]);
    assert_eq!(summary["retired"], 0, "{summary}");
    assert_eq!(summary["records"], 10, "{summary}");
}

/// A Delta table deleted and made again at the same version is another table: an append
/// does not call it up to date, and the set becomes the new table's.
#[test]
fn a_delta_table_made_again_at_the_same_version_is_not_up_to_date() {
    let table = scratch("delta-again");
    let _ = fs::remove_dir_all(&table);
    let Some(()) = write_delta(&table, 0, 20, "append") else {
        eprintln!("skipped: no deltalake venv (run scripts/delta_venv.sh)");
        return;
    };
    let out = scratch("delta-again-out");
    delta(&table, &out, &[]);
    fs::remove_dir_all(&table).unwrap();
    write_delta(&table, 500, 30, "append");
    let summary = delta(&table, &out, &["--append"]);
    assert_eq!(summary["up_to_date"], false, "{summary}");
    assert_eq!(read_manifest(&out, "data")["records"], 30);
    let full = scratch("delta-again-full");
    delta(&table, &full, &["--overwrite"]);
    let (code, stdout, err) = run(["verify", s(&out), "--deep"]);
    assert_eq!(code, 0, "{stdout}{err}");
    let ids = |dir: &Path| {
        let mut v: Vec<String> = crate::inspect_all(dir)
            .iter()
            .map(|r| r["id"].to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(ids(&out), ids(&full));
}

/// `skipped` entries of images fixed since are dropped: an image left out (it did not
/// decode) stays listed while its folder is not read again, and once it is fixed (its
/// folder changed, read again) it is converted and no longer listed. Before, an append
/// carried every earlier entry on.
#[test]
fn an_image_fixed_since_it_was_skipped_is_no_longer_listed() {
    let dir = crate::copy_tree(&crate::root().join("testdata/images"), "skipped-fixed");
    fs::write(dir.join("dogs/zz-bad.jpg"), b"not an image").unwrap();
    let out = scratch("skipped-fixed-out");
    let images = |extra: &[&str]| -> Value {
        let mut args = vec!["convert", "images", s(&dir), "-o", s(&out), "--json"];
        args.extend_from_slice(&["--on-error", "skip", "--max-records-per-shard", "2"]);
        args.extend_from_slice(extra);
        let (code, stdout, err) = run(args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&stdout).unwrap()
    };
    let listed = || -> Vec<String> {
        (read_manifest(&out, "data")["skipped"]
            .as_array()
            .unwrap()
            .iter())
        .map(|s| s["path"].as_str().unwrap().to_owned())
        .collect()
    };
    images(&[]);
    assert_eq!(listed(), ["dogs/zz-bad.jpg"]);
    // (Its folder counts it among its images, which no shard holds: not a gap.)
    let (code, stdout, err) = run(["verify", s(&out)]);
    assert_eq!(code, 0, "{stdout}{err}");
    let records = read_manifest(&out, "data")["records"].as_u64().unwrap();
    // Another folder gains an image: the bad one is not read again, and stays listed.
    fs::copy(dir.join("cats/a.jpg"), dir.join("cats/z-new.jpg")).unwrap();
    images(&["--append"]);
    assert_eq!(listed(), ["dogs/zz-bad.jpg"]);
    // Fixed: converted, no longer listed.
    fs::copy(dir.join("cats/a.jpg"), dir.join("dogs/zz-bad.jpg")).unwrap();
    images(&["--append"]);
    assert!(listed().is_empty(), "{:?}", listed());
    assert_eq!(
        read_manifest(&out, "data")["records"].as_u64().unwrap(),
        records + 2
    );
    let (code, stdout, err) = run(["verify", s(&out), "--deep"]);
    assert_eq!(code, 0, "{stdout}{err}");
}

/// `finalize` respects an append's claim: workers' parts of a new generation are not
/// published while another append publishes to the set (exit 1, the parts kept); once it
/// has ended, they are refused as planned against a set that moved on.
#[test]
fn finalize_waits_for_an_appends_claim() {
    let (t, out) = grown("finalize-claim", 2);
    for i in ["0", "1"] {
        convert(
            &t,
            &out,
            &["--append", "--num-workers", "2", "--worker-index", i],
        );
    }
    write_table(&t.join("part-3.parquet"), 50, 3000, 50);
    let (append, gate) = paused_append(&t, &out, "finalize-claim-gate");
    let (code, _, err) = run(["finalize", s(&out)]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("another run is publishing to this output"),
        "{err}"
    );
    assert!(out.join(".data.tfshard-parts").exists(), "the parts kept");
    fs::write(&gate, "").unwrap();
    let done = append.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let (code, _, err) = run(["finalize", s(&out)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("run the workers again"), "{err}");
    same_as_full(&t, &out, &[], &["data"]);
}

/// A split set killed between its splits' manifests: a worker (which holds no claim)
/// finds the lagging split and stops, saying to complete the set first; the run that
/// completes it keeps what `--retain` keeps of the lagging split.
#[test]
fn lagging_splits_are_completed_by_a_claimed_run_keeping_what_retain_keeps() {
    let t = folder("split-retain", 2);
    let out = scratch("split-retain-out");
    convert(&t, &out, &SPLIT);
    let mut again = SPLIT.to_vec();
    again.extend(["--append", "--retain", "3"]);
    for f in 2..4 {
        write_table(&t.join(format!("part-{f}.parquet")), 50, f * 1000, 50);
        convert(&t, &out, &again);
    }
    write_table(&t.join("part-4.parquet"), 50, 4000, 50);
    let mut args = vec!["convert", "parquet", s(&t), "-o", s(&out)];
    args.extend_from_slice(&again);
    args.extend_from_slice(&["--max-records-per-shard", "100"]);
    let killed = crate::tfshard()
        .args(&args)
        .env("TFSHARD_FAILPOINTS", "publish:manifest=exit@1")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), Some(137));
    let mut worker = args.clone();
    worker.extend_from_slice(&["--num-workers", "2", "--worker-index", "0"]);
    let (code, _, err) = run(worker);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("without workers, to complete them"), "{err}");
    let pinned = |p: &str| -> Vec<String> {
        let mut v: Vec<String> = (fs::read_dir(&out).unwrap())
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!("{p}.manifest-g")))
            .collect();
        v.sort();
        v
    };
    convert(&t, &out, &again);
    assert_eq!(pinned("a").len(), 3, "{:?}", pinned("a"));
    assert_eq!(pinned("b").len(), 3, "{:?}", pinned("b"));
    same_as_full(&t, &out, &SPLIT, &["a", "b"]);
    for p in pinned("a").iter().chain(&pinned("b")) {
        let (code, stdout, err) = run(["verify", s(&out.join(p))]);
        assert_eq!(code, 0, "{p}: {stdout}{err}");
    }
}

/// An append killed after its pinned manifest, before its manifest, leaves that
/// generation's pinned manifest and shards; a run that finds nothing to do (the change
/// undone) deletes them, so that no pinned manifest names shards that are gone.
#[test]
fn a_killed_appends_pinned_manifest_goes_with_its_shards() {
    let (t, out) = grown("pinned-leftover", 2);
    let mut args = vec!["convert", "parquet", s(&t), "-o", s(&out), "--append"];
    args.extend_from_slice(&["--max-records-per-shard", "100"]);
    let killed = crate::tfshard()
        .args(&args)
        .env("TFSHARD_FAILPOINTS", "publish:pinned=exit")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), Some(137));
    assert!(out.join("data.manifest-g00001.json").exists());
    fs::remove_file(t.join("part-2.parquet")).unwrap();
    let (code, stdout, err) = run(args.iter().copied().chain(["--json"]));
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("\"up_to_date\":true"), "{stdout}");
    assert!(
        !out.join("data.manifest-g00001.json").exists(),
        "the killed run's pinned manifest"
    );
    let names: Vec<String> = (fs::read_dir(&out).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("-g00001-"))
        .collect();
    assert!(names.is_empty(), "its shards: {names:?}");
    same_as_full(&t, &out, &[], &["data"]);
}
