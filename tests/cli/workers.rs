//! Many machines: `--num-workers N --worker-index I`, then `finalize`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{root, run, scratch};

/// The Hive test table: 15 files of one row group each.
fn table() -> PathBuf {
    root().join("testdata/hive")
}

fn convert(out: &Path, extra: &[&str]) -> (i32, String) {
    let mut args: Vec<String> = vec![
        "convert".into(),
        "parquet".into(),
        table().display().to_string(),
        "-o".into(),
        out.display().to_string(),
        "--target-shard-size".into(),
        "600B".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let (code, _, err) = run(&args);
    (code, err)
}

/// Runs all `n` workers into `out`, in order, with `extra` flags.
fn run_workers(out: &Path, n: u64, extra: &[&str]) {
    for i in 0..n {
        let (n, i) = (n.to_string(), i.to_string());
        let args = [
            &["--num-workers", n.as_str(), "--worker-index", i.as_str()][..],
            extra,
        ]
        .concat();
        let (code, err) = convert(out, &args);
        assert_eq!(code, 0, "worker {i}: {err}");
    }
}

/// A `finalize` of `out` killed after its first move (exit 137, as if killed).
fn finalize_killed_after_a_move(out: &Path) {
    let status = std::process::Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .arg("finalize")
        .arg(out)
        .env("TFSHARD_FAILPOINTS", "publish:moved=exit")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(137));
}

fn manifest(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn records(dir: &Path, prefix: &str) -> Vec<u8> {
    crate::records_in_order(dir, prefix)
}

/// Strips what legitimately differs between two manifests of the same records.
fn comparable(mut m: Value) -> Value {
    let o = m.as_object_mut().unwrap();
    o.remove("created");
    o.remove("shards");
    m
}

#[test]
fn workers_in_any_order_then_finalize_equal_one_machine() {
    let one = scratch("workers-one");
    let (code, err) = convert(&one, &[]);
    assert_eq!(code, 0, "{err}");
    let single = manifest(&one.join("data.manifest.json"));
    let single_shards = single["shards"].as_array().unwrap().len();
    crate::in_order_sources(&single);
    // 15 row groups: N = 20 leaves some workers with nothing.
    for n in [1u64, 2, 3, 5, 20] {
        let out = scratch(&format!("workers-{n}"));
        for i in (0..n).rev() {
            let (code, err) = convert(
                &out,
                &[
                    "--num-workers",
                    &n.to_string(),
                    "--worker-index",
                    &i.to_string(),
                ],
            );
            assert_eq!(code, 0, "N={n} I={i}: {err}");
        }
        // Every shard but each worker's last is filled by the size rule.
        let mut largest_frame = 0u64;
        for part in 0..n {
            let m = manifest(&out.join(format!(
                ".data.tfshard-parts/{part:05}-of-{n:05}/data.manifest.json"
            )));
            assert_eq!(m["worker"]["index"], part);
            let shards = m["shards"].as_array().unwrap();
            for s in shards {
                assert!(
                    s["bytes"].as_u64().unwrap() <= 600,
                    "N={n}: a shard above the target"
                );
                if s["records"].as_u64().unwrap() == 1 {
                    largest_frame = largest_frame.max(s["bytes"].as_u64().unwrap());
                }
            }
            for s in &shards[..shards.len().saturating_sub(1)] {
                assert!(
                    s["bytes"].as_u64().unwrap() + 200 > 600,
                    "N={n} worker {part}: a shard not filled: {s}"
                );
            }
        }
        let (code, out_json, err) = run(["finalize".as_ref(), out.as_os_str(), "--json".as_ref()]);
        assert_eq!(code, 0, "N={n}: {err}");
        let summary: Value = serde_json::from_str(&out_json).unwrap();
        assert_eq!(summary["workers"], n);
        assert_eq!(summary["records"], 24);
        assert_eq!(
            records(&out, "data"),
            records(&one, "data"),
            "N={n}: records differ"
        );
        let finalized = manifest(&out.join("data.manifest.json"));
        crate::in_order_sources(&finalized);
        assert_eq!(
            comparable(finalized.clone()),
            comparable(single.clone()),
            "N={n}"
        );
        let shards = finalized["shards"].as_array().unwrap().len();
        assert!(
            shards < single_shards + n as usize,
            "N={n}: {shards} shards"
        );
        assert!(
            !out.join(".data.tfshard-parts").exists(),
            "N={n}: parts left"
        );
        let (code, _, err) = run(["verify".as_ref(), out.as_os_str()]);
        assert_eq!(code, 0, "N={n}: {err}");
    }
}

#[test]
fn a_retried_or_duplicated_worker_leaves_one_part() {
    let one = scratch("workers-dup-one");
    assert_eq!(convert(&one, &[]).0, 0);
    let out = scratch("workers-dup");
    let w1 = ["--num-workers", "2", "--worker-index", "1"];
    assert_eq!(convert(&out, &w1).0, 0);
    assert_eq!(convert(&out, &w1).0, 0, "a retried worker");
    // Two copies of worker 0 at once.
    let spawn = || {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
            .args(["convert", "parquet"])
            .arg(table())
            .arg("-o")
            .arg(&out)
            .args([
                "--target-shard-size",
                "600B",
                "--num-workers",
                "2",
                "--worker-index",
                "0",
            ])
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (spawn(), spawn());
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    let (code, _, err) = run(["finalize".as_ref(), out.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(records(&out, "data"), records(&one, "data"));
}

#[test]
fn finalize_with_a_part_missing_publishes_nothing() {
    let out = scratch("workers-missing");
    for i in ["0", "2"] {
        assert_eq!(
            convert(&out, &["--num-workers", "4", "--worker-index", i]).0,
            0
        );
    }
    let (code, _, err) = run(["finalize".as_ref(), out.as_os_str()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("workers 1, 3 of 4"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, [".data.tfshard-parts"], "published something");
    // No parts at all.
    let (code, _, err) = run(["finalize".as_ref(), scratch("workers-none").as_os_str()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no worker parts"), "{err}");
}

#[test]
fn finalize_killed_midway_completes_on_rerun() {
    let one = scratch("workers-kill-one");
    assert_eq!(convert(&one, &[]).0, 0);
    let out = scratch("workers-kill");
    run_workers(&out, 3, &[]);
    finalize_killed_after_a_move(&out);
    assert!(!out.join("data.manifest.json").exists());
    let (code, _, err) = run(["finalize".as_ref(), out.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(records(&out, "data"), records(&one, "data"));
    let (code, _, err) = run(["verify".as_ref(), out.as_os_str()]);
    assert_eq!(code, 0, "{err}");
}

/// A `finalize` killed midway leaves its claim. Held by a process of another
/// host, it is respected while fresh (its holder may be alive), and taken over once stale
/// (not refreshed for 60 s); the next one then completes the recorded plan. (A dead
/// process of this host is seen at once: `finalize_killed_midway_completes_on_rerun`.)
#[test]
fn a_killed_finalizes_claim_goes_stale_and_is_taken_over() {
    let one = scratch("workers-claim-one");
    assert_eq!(convert(&one, &[]).0, 0);
    let out = scratch("workers-claim");
    run_workers(&out, 3, &[]);
    finalize_killed_after_a_move(&out);
    let claim = out.join(".data.tfshard-parts/finalizing");
    let mut note: Value = serde_json::from_slice(&std::fs::read(&claim).unwrap()).unwrap();
    assert!(
        note["holder"].is_string() && note["refreshed"].is_u64() && note["pid"].is_u64(),
        "{note}"
    );
    // As if held by a finalize on another machine, refreshed just now.
    note["host"] = "another-host".into();
    std::fs::write(&claim, note.to_string()).unwrap();
    let (code, _, err) = run(["finalize".as_ref(), out.as_os_str()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("another finalize is publishing to this output"),
        "{err}"
    );
    assert!(!out.join("data.manifest.json").exists());
    // As if 2 minutes had gone by without a refresh.
    note["refreshed"] = (note["refreshed"].as_u64().unwrap() - 120).into();
    std::fs::write(&claim, note.to_string()).unwrap();
    let (code, _, err) = run(["finalize".as_ref(), out.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(records(&out, "data"), records(&one, "data"));
    assert!(!out.join(".data.tfshard-parts").exists());
    let (code, _, err) = run(["verify".as_ref(), out.as_os_str()]);
    assert_eq!(code, 0, "{err}");
}

/// A `finalize` that finds the set's manifest written by the claim's holder
/// (which is still removing the parts) reports the set published, exit 0.
#[test]
fn a_finalize_that_finds_the_set_published_says_so() {
    let out = scratch("workers-published");
    run_workers(&out, 2, &[]);
    let gate = scratch("workers-published-gate").join("go");
    let mut holder = std::process::Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .arg("finalize")
        .arg(&out)
        .env(
            "TFSHARD_FAILPOINTS",
            format!("finalize:published=wait:{}", gate.display()),
        )
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::wait_for_failpoint(&mut holder, &gate, "the manifest was written");
    let (code, stdout, err) = run(["finalize".as_ref(), out.as_os_str(), "--json".as_ref()]);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["already_published"], true, "{summary}");
    assert_eq!(
        summary["records"],
        manifest(&out.join("data.manifest.json"))["records"]
    );
    std::fs::write(&gate, "").unwrap();
    let done = holder.wait_with_output().unwrap();
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(!out.join(".data.tfshard-parts").exists());
}

#[test]
fn splits_with_workers_finalize_together() {
    let one = scratch("workers-split-one");
    let split = ["--split", "train=0.7,test=0.3", "--seed", "5"];
    assert_eq!(convert(&one, &split).0, 0);
    let out = scratch("workers-split");
    for i in 0..3 {
        let i = i.to_string();
        let args = [&split[..], &["--num-workers", "3", "--worker-index", &i]].concat();
        assert_eq!(convert(&out, &args).0, 0);
    }
    let (code, stdout, err) = run(["finalize".as_ref(), out.as_os_str(), "--json".as_ref()]);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        summary["manifest"].is_null() && summary["splits"]["train"]["records"].is_u64(),
        "{summary}"
    );
    for prefix in ["train", "test"] {
        assert_eq!(records(&out, prefix), records(&one, prefix), "{prefix}");
    }
}

/// A worker whose share starts inside a file (small.parquet's second row group) counts
/// that file's records from where its share starts: the finalized shards name the same
/// rows as one machine's.
#[test]
fn a_share_that_starts_inside_a_file_names_its_rows_from_there() {
    let small = root().join("testdata/small.parquet");
    let args = |out: &Path, extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["convert", "parquet", crate::s(&small), "-o", crate::s(out)]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(["--target-shard-size".into(), "64KiB".into()]);
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let one = scratch("workers-inside-one");
    let (code, _, err) = run(args(&one, &[]));
    assert_eq!(code, 0, "{err}");
    let out = scratch("workers-inside");
    let mut firsts = Vec::new();
    for i in ["0", "1", "2"] {
        let (code, _, err) = run(args(&out, &["--num-workers", "3", "--worker-index", i]));
        assert_eq!(code, 0, "worker {i}: {err}");
        let part = manifest(&out.join(format!(
            ".data.tfshard-parts/0000{i}-of-00003/data.manifest.json"
        )));
        firsts.push(part["shards"][0]["sources"][0]["rows"][0].clone());
    }
    // The second row group starts at row 1,000 of 2,000 (the middle worker's share).
    assert!(firsts.contains(&Value::from(1000)), "{firsts:?}");
    let (code, _, err) = run(["finalize".as_ref(), out.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    let joined = |m: &Value| -> Vec<(String, u64, u64)> {
        let mut runs: Vec<(String, u64, u64)> = Vec::new();
        for (input, a, b) in crate::in_order_sources(m).into_iter().flatten() {
            match runs.last_mut() {
                Some(last) if last.0 == input && last.2 == a => last.2 = b,
                _ => runs.push((input, a, b)),
            }
        }
        runs
    };
    let finalized = manifest(&out.join("data.manifest.json"));
    assert_eq!(
        joined(&finalized),
        joined(&manifest(&one.join("data.manifest.json")))
    );
}

#[test]
fn worker_flags_that_cannot_work_are_usage_errors() {
    let out = scratch("workers-usage");
    for (extra, needle) in [
        (
            vec!["--num-workers", "2", "--worker-index", "0", "--shuffle"],
            "shuffle with the engine",
        ),
        (
            vec![
                "--num-workers",
                "2",
                "--worker-index",
                "0",
                "--min-shards",
                "4",
            ],
            "global total",
        ),
        (
            vec!["--num-workers", "2", "--worker-index", "2"],
            "not below --num-workers 2",
        ),
        (vec!["--num-workers", "2"], "--worker-index"),
    ] {
        let (code, err) = convert(&out, &extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
    // A worker does not write into a folder that holds a published set.
    let published = scratch("workers-published");
    assert_eq!(convert(&published, &[]).0, 0);
    let (code, err) = convert(&published, &["--num-workers", "2", "--worker-index", "0"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not empty"), "{err}");
}

/// The wheel `scripts/build_wheel.sh` built (`.ci/run` builds it before the tests).
fn built_wheel() -> Option<PathBuf> {
    let dir = root().join("target/wheels");
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    wheels.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    wheels.pop()
}

#[test]
fn pip_installing_the_wheel_puts_tfshard_on_path() {
    let Some(wheel) = built_wheel() else {
        if std::env::var_os("TFSHARD_REQUIRE_SERVERS").is_some() {
            panic!("no wheel in target/wheels (scripts/build_wheel.sh --debug)");
        }
        eprintln!("skipped: no wheel (run scripts/build_wheel.sh --debug)");
        return;
    };
    let venv = scratch("wheel-venv");
    let ok = |c: &mut std::process::Command| {
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{c:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    ok(std::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv));
    ok(std::process::Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--no-index", "--no-deps"])
        .arg(&wheel));
    let version = ok(std::process::Command::new(venv.join("bin/tfshard")).arg("--version"));
    assert_eq!(
        version.trim(),
        format!("tfshard {}", env!("CARGO_PKG_VERSION"))
    );
    // On PATH, as an engine's task finds it.
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = scratch("wheel-out");
    ok(std::process::Command::new("tfshard")
        .env("PATH", path)
        .args(["convert", "parquet"])
        .arg(root().join("testdata/small.parquet"))
        .arg("-o")
        .arg(&out)
        .arg("--quiet"));
    assert!(out.join("data.manifest.json").exists());
}
