//! `tfshard stats`: statistics of TensorFlow's own records, in TFDV's format; and the
//! statistics a conversion keeps with `--stats`.

use prost::Message;
use serde_json::Value;
use tfshard::stats::proto;

use crate::{convert_parquet, golden, read_manifest, root, run, s, scratch};

fn feature<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no feature {name} in {json}"))
}

/// The records TensorFlow wrote (testdata/golden/examples.tfrecord), counted by hand:
/// presence with empty lists present, values per record, numbers (NaN and infinities
/// apart), bytes' unique values, lengths and values that are not UTF-8.
#[test]
fn statistics_of_tensorflows_records() {
    let (code, out, err) = run([
        "stats",
        golden("examples.tfrecord").to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["records"], 4);
    let label = feature(&json, "label");
    assert_eq!(label["type"], "INT");
    assert_eq!(
        (label["present"].as_u64(), label["missing"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(label["values_per_record"][0], 0.0);
    assert_eq!(label["values_per_record"][2], 1.0);
    let n = &label["numbers"];
    assert_eq!(
        (n["min"].as_f64(), n["max"].as_f64()),
        (Some(3.0), Some(7.0))
    );
    assert_eq!(
        (n["mean"].as_f64(), n["std_dev"].as_f64()),
        (Some(5.0), Some(2.0))
    );
    let ints = &feature(&json, "ints")["numbers"];
    assert_eq!(ints["zeros"], 1);
    assert_eq!(ints["min"].as_f64(), Some(i64::MIN as f64));
    assert_eq!(ints["max"].as_f64(), Some(i64::MAX as f64));
    let vec = &feature(&json, "vec")["numbers"];
    assert_eq!(vec["nan"], 1);
    assert_eq!(vec["min"].as_f64(), None, "-inf is no JSON number: {vec}");
    let score = &feature(&json, "score")["numbers"];
    // The float32 values written, not their float64 sources.
    assert_eq!(score["min"].as_f64(), Some(f64::from(f32::from_bits(1))));
    // (serde_json's default parser may miss the last bit of a large number.)
    let max = score["max"].as_f64().unwrap();
    assert!((max / f64::from(f32::MAX) - 1.0).abs() < 1e-15, "{max}");
    let tags = feature(&json, "tags");
    assert_eq!(tags["type"], "STRING");
    assert_eq!(tags["present"], 2);
    assert_eq!(tags["strings"]["unique"], 3);
    assert_eq!(tags["strings"]["avg_length"], 1.0);
    assert_eq!(feature(&json, "blob")["strings"]["invalid_utf8"], 1);
    let id = &feature(&json, "id")["strings"]["top_values"];
    assert_eq!(id.as_array().unwrap().len(), 3);
    // Ties: the greater value first, as TFDV orders them.
    assert_eq!(id[0][0], "row-3");
}

/// `--format tfdv -o FILE` writes a `DatasetFeatureStatisticsList` whose one dataset
/// names each feature by a one-step path; without `-o` it is a usage error.
#[test]
fn tfdv_format_is_a_statistics_list() {
    let dir = scratch("stats-tfdv");
    let out = dir.join("stats.pb");
    let (code, _, err) = run([
        "stats",
        golden("examples.tfrecord").to_str().unwrap(),
        "--format",
        "tfdv",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let list = proto::DatasetFeatureStatisticsList::decode(&*std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(list.datasets.len(), 1);
    let d = &list.datasets[0];
    assert_eq!(d.num_examples, 4);
    let label = d
        .features
        .iter()
        .find(|f| tfshard::stats::feature_name(f) == "label")
        .unwrap();
    assert_eq!(
        label.field_id,
        Some(proto::FieldId::Path(proto::Path {
            step: vec!["label".into()]
        }))
    );
    assert_eq!(label.r#type, proto::FeatureType::Int as i32);
    let Some(proto::Stats::NumStats(n)) = &label.stats else {
        panic!("{label:?}")
    };
    // TFDV's median of two values: the greater (the value at index floor(n / 2)).
    assert_eq!((n.mean, n.std_dev, n.median), (5.0, 2.0, 7.0));
    let types: Vec<i32> = n.histograms.iter().map(|h| h.r#type).collect();
    assert_eq!(
        types,
        [
            proto::HistogramType::Standard as i32,
            proto::HistogramType::Quantiles as i32
        ]
    );
    let total: f64 = n.histograms[0].buckets.iter().map(|b| b.sample_count).sum();
    assert_eq!(total, 2.0);

    let (code, _, err) = run([
        "stats",
        golden("examples.tfrecord").to_str().unwrap(),
        "--format",
        "tfdv",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("-o FILE"), "{err}");
}

/// A file cut short: exit 1, the file named; nothing written.
#[test]
fn a_corrupt_file_is_named() {
    let dir = scratch("stats-corrupt");
    let bytes = std::fs::read(golden("examples.tfrecord")).unwrap();
    let cut = dir.join("cut.tfrecord");
    std::fs::write(&cut, &bytes[..bytes.len() - 5]).unwrap();
    let out = dir.join("stats.pb");
    let (code, _, err) = run([
        "stats",
        cut.to_str().unwrap(),
        "--format",
        "tfdv",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cut.tfrecord"), "{err}");
    assert!(!out.exists());
}

/// The table names every feature on a line of its own.
#[test]
fn the_table_has_a_line_a_feature() {
    let (code, out, err) = run(["stats", golden("examples.tfrecord").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for name in ["blob", "id", "ints", "label", "score", "tags", "vec"] {
        assert_eq!(
            out.lines()
                .filter(|l| l.split_whitespace().next() == Some(name))
                .count(),
            1,
            "{name}: {out}"
        );
    }
    assert!(out.starts_with("4 records, 7 features"), "{out}");
}

/// `stats --json` of `paths`, parsed.
fn stats_json(paths: &[&str]) -> Value {
    let mut args = vec!["stats", "--json"];
    args.extend_from_slice(paths);
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// The shard files a manifest lists, as paths.
fn listed(dir: &std::path::Path) -> Vec<String> {
    read_manifest(dir, "data")["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sh| s(&dir.join(sh["file"].as_str().unwrap())).to_owned())
        .collect()
}

/// `convert --stats` keeps the statistics of the records it wrote: `data.stats.pb` in
/// TFDV's format named in the manifest (size, SHA-256), a partial beside each shard;
/// `stats OUT` prints them without reading a shard, and they are what `stats` computes
/// from the shard files. The same bytes at any thread count.
#[test]
fn a_conversion_keeps_the_statistics_of_its_shards() {
    let dir = scratch("stats-convert");
    let input = root().join("testdata/small.parquet");
    let (one, two) = (dir.join("one"), dir.join("two"));
    for (out, threads) in [(&one, "1"), (&two, "2")] {
        let (code, _, err) = convert_parquet(
            &input,
            out,
            &[
                "--stats",
                "--target-shard-size",
                "60KB",
                "--threads",
                threads,
                "--quiet",
            ],
        );
        assert_eq!(code, 0, "{err}");
    }
    let m = read_manifest(&one, "data");
    let shards = m["shards"].as_array().unwrap();
    assert!(shards.len() > 2, "{m}");
    let st = &m["stats"];
    assert_eq!(st["file"], "data.stats.pb");
    let bytes = std::fs::read(one.join("data.stats.pb")).unwrap();
    assert_eq!(st["bytes"].as_u64(), Some(bytes.len() as u64));
    let sha = st["sha256"].as_str().unwrap();
    assert!(
        sha.len() == 64
            && sha
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{sha}"
    );
    let mut partials = 0;
    for sh in shards {
        let companion = one.join(format!("{}.stats", sh["file"].as_str().unwrap()));
        partials += std::fs::metadata(&companion).unwrap().len();
    }
    assert_eq!(st["partials_bytes"].as_u64(), Some(partials));
    // TFDV's message, the live set first.
    let list = proto::DatasetFeatureStatisticsList::decode(bytes.as_slice()).unwrap();
    assert_eq!(list.datasets[0].num_examples, 2000);
    // Stored, and computed from the files: the same.
    let stored = stats_json(&[s(&one)]);
    let files = listed(&one);
    let computed = stats_json(&files.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(stored, computed);
    assert_eq!(stored["records"], 2000);
    // Deterministic: the same statistics and partials whatever the threads.
    for name in std::iter::once("data.stats.pb".to_owned()).chain(
        shards
            .iter()
            .map(|sh| format!("{}.stats", sh["file"].as_str().unwrap())),
    ) {
        assert_eq!(
            std::fs::read(one.join(&name)).unwrap(),
            std::fs::read(two.join(&name)).unwrap(),
            "{name}"
        );
    }
    let (code, out, err) = run(["verify", s(&one)]);
    assert_eq!(code, 0, "{out}{err}");
}

/// A statistics file that is not the manifest's (damaged, or an interrupted writer's) is
/// a `verify` problem, and `stats` computes the statistics from the shards instead.
#[test]
fn statistics_that_are_not_the_manifests_are_found() {
    let out = scratch("stats-damaged");
    let input = root().join("testdata/small.parquet");
    let (code, _, err) = convert_parquet(&input, &out, &["--stats", "--quiet"]);
    assert_eq!(code, 0, "{err}");
    let good = stats_json(&[s(&out)]);
    let path = out.join("data.stats.pb");
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let (code, stdout, _) = run(["verify", s(&out), "--json"]);
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let problem = report["problems"][0]["problem"].as_str().unwrap();
    assert!(problem.starts_with("stats mismatch"), "{problem}");
    let (code, stdout, err) = run(["stats", s(&out), "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("not the manifest's"), "{err}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap(), good);
    std::fs::remove_file(&path).unwrap();
    let (code, stdout, _) = run(["verify", s(&out)]);
    assert_eq!(code, 1);
    assert!(stdout.contains("stats mismatch"), "{stdout}");
}

/// A run killed after some shards and resumed keeps the statistics a clean run keeps
/// (the partials of the shards it reuses come from its journal), byte for byte.
#[test]
fn a_resumed_conversion_keeps_the_same_statistics() {
    let dir = scratch("stats-resume");
    let input = root().join("testdata/small.parquet");
    let (clean, resumed) = (dir.join("clean"), dir.join("resumed"));
    let flags = ["--stats", "--target-shard-size", "40KB", "--quiet"];
    let (code, _, err) = convert_parquet(&input, &clean, &flags);
    assert_eq!(code, 0, "{err}");
    let mut args = vec![
        "convert",
        "parquet",
        s(&input),
        "-o",
        s(&resumed),
        "--resume",
    ];
    args.extend_from_slice(&flags);
    let status = std::process::Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(&args)
        .env("TFSHARD_FAILPOINTS", "shard:journaled=exit")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(137));
    let (code, _, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read(clean.join("data.stats.pb")).unwrap(),
        std::fs::read(resumed.join("data.stats.pb")).unwrap()
    );
}

/// Workers keep their shards' partials; `finalize` publishes the set's statistics from
/// them; an append must keep the set's choice (`--stats`), and the statistics follow the
/// live shards.
#[test]
fn workers_and_appends_keep_the_statistics_of_the_live_shards() {
    let dir = scratch("stats-workers");
    let input = root().join("testdata/small.parquet");
    let out = dir.join("out");
    for i in ["0", "1"] {
        let (code, _, err) = convert_parquet(
            &input,
            &out,
            &[
                "--stats",
                "--num-workers",
                "2",
                "--worker-index",
                i,
                "--quiet",
                "--target-shard-size",
                "60KB",
            ],
        );
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = run(["finalize", s(&out), "--quiet"]);
    assert_eq!(code, 0, "{err}");
    let files = listed(&out);
    let computed = stats_json(&files.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(stats_json(&[s(&out)]), computed);
    assert_eq!(computed["records"], 2000);
    // An append without the set's --stats is refused, naming it.
    let (code, _, err) = convert_parquet(&input, &out, &["--append", "--quiet"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("stats"), "{err}");
    // The input rewritten: the append retires its shards, and the statistics follow.
    let table = dir.join("in.parquet");
    std::fs::copy(&input, &table).unwrap();
    let plain = dir.join("plain");
    let (code, _, err) = convert_parquet(
        &table,
        &plain,
        &["--stats", "--quiet", "--target-shard-size", "60KB"],
    );
    assert_eq!(code, 0, "{err}");
    let extra = dir.join("extra.parquet");
    std::fs::copy(&input, &extra).unwrap();
    let (code, _, err) = run([
        "convert",
        "parquet",
        s(&table),
        s(&extra),
        "-o",
        s(&plain),
        "--append",
        "--stats",
        "--quiet",
        "--target-shard-size",
        "60KB",
    ]);
    assert_eq!(code, 0, "{err}");
    let stored = stats_json(&[s(&plain)]);
    assert_eq!(stored["records"], 4000);
    let files = listed(&plain);
    let computed = stats_json(&files.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(stored, computed);
    // One generation's statistics: its shards' partials merged, as computed from them.
    let manifest = read_manifest(&plain, "data");
    let newest: Vec<String> = manifest["shards"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|sh| sh["generation"] == 1)
        .map(|sh| s(&plain.join(sh["file"].as_str().unwrap())).to_owned())
        .collect();
    let (code, out_text, err) = run(["stats", s(&plain), "--generation", "1", "--json"]);
    assert_eq!(code, 0, "{err}");
    let generation: Value = serde_json::from_str(&out_text).unwrap();
    assert_eq!(generation["records"], 2000);
    assert_eq!(
        generation,
        stats_json(&newest.iter().map(String::as_str).collect::<Vec<_>>())
    );
    let (code, _, err) = run(["stats", s(&plain), "--generation", "7"]);
    assert_eq!(code, 2, "{err}");
    let (code, out_text, err) = run(["verify", s(&plain)]);
    assert_eq!(code, 0, "{out_text}{err}");
}

/// Without `--stats`, nothing of the kind is written.
#[test]
fn without_stats_nothing_is_kept() {
    let out = scratch("stats-none");
    let (code, _, err) =
        convert_parquet(&root().join("testdata/small.parquet"), &out, &["--quiet"]);
    assert_eq!(code, 0, "{err}");
    assert!(read_manifest(&out, "data").get("stats").is_none());
    let kept: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".stats") || n.ends_with(".stats.pb"))
        .collect();
    assert!(kept.is_empty(), "{kept:?}");
}

/// A table of `rows` rows drawn with `seed`: `seconds` about normal (mean 100, deviation
/// 15) times `scale`, `kind` one of four categories (weights `weights`), `n` 3 floats.
fn drawn_table(path: &std::path::Path, rows: usize, seed: u64, scale: f64, weights: [u32; 4]) {
    use arrow_array::{ArrayRef, Float64Array, RecordBatch, StringArray};
    use std::sync::Arc;
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 11) as f64) / ((1u64 << 53) as f64)
    };
    let mut seconds = Vec::with_capacity(rows);
    let mut kind = Vec::with_capacity(rows);
    let total: u32 = weights.iter().sum();
    for _ in 0..rows {
        // Twelve uniforms: about normal.
        let z: f64 = (0..12).map(|_| next()).sum::<f64>() - 6.0;
        seconds.push((100.0 + 15.0 * z) * scale);
        let mut pick = (next() * total as f64) as u32;
        let mut k = 0;
        while pick >= weights[k] {
            pick -= weights[k];
            k += 1;
        }
        kind.push(["a", "b", "c", "d"][k]);
    }
    let batch = RecordBatch::try_from_iter(vec![
        ("seconds", Arc::new(Float64Array::from(seconds)) as ArrayRef),
        ("kind", Arc::new(StringArray::from(kind)) as ArrayRef),
    ])
    .unwrap();
    crate::convert::write_batch(path, &batch);
}

/// `verify --baseline`: a resample of the same data has no anomaly; a unit changed from
/// seconds to milliseconds is the numeric feature's Jensen–Shannon divergence, a category
/// that vanished the bytes feature's L-infinity distance, each named on a line (exit 1,
/// `--json` listing them); `--threshold` sets a feature's bar; a baseline that cannot be
/// read is a usage error naming it.
#[test]
fn verify_against_a_baseline_finds_drift() {
    let dir = scratch("stats-drift");
    let convert = |name: &str, seed: u64, scale: f64, weights: [u32; 4]| {
        let table = dir.join(format!("{name}.parquet"));
        drawn_table(&table, 20_000, seed, scale, weights);
        let out = dir.join(name);
        let (code, _, err) = convert_parquet(&table, &out, &["--stats", "--quiet"]);
        assert_eq!(code, 0, "{err}");
        out
    };
    let base = convert("base", 1, 1.0, [40, 30, 20, 10]);
    let resample = convert("resample", 2, 1.0, [40, 30, 20, 10]);
    let drifted = convert("drifted", 3, 1000.0, [40, 20, 40, 0]);
    let (code, out, err) = run(["verify", s(&resample), "--baseline", s(&base)]);
    assert_eq!(code, 0, "{out}{err}");
    // Against the baseline's statistics file, and against its shards computed: the same.
    for b in [
        base.join("data.stats.pb"),
        base.join("data-00000-of-00001.tfrecord"),
    ] {
        let (code, out, err) = run(["verify", s(&resample), "--baseline", s(&b)]);
        assert_eq!(code, 0, "{}: {out}{err}", b.display());
    }
    let (code, out, err) = run(["verify", s(&drifted), "--baseline", s(&base), "--json"]);
    assert_eq!(code, 1, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["ok"], false);
    let kinds: Vec<(String, String)> = report["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["feature"].as_str().unwrap().to_owned(),
                a["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("kind".to_owned(), "COMPARATOR_L_INFTY_HIGH".to_owned()),
            (
                "seconds".to_owned(),
                "COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH".to_owned()
            ),
        ],
        "{out}"
    );
    let seconds = &report["anomalies"][1];
    assert!(seconds["measured"].as_f64().unwrap() > 0.9, "{seconds}");
    assert_eq!(seconds["threshold"].as_f64(), Some(0.1));
    let (code, out, _) = run(["verify", s(&drifted), "--baseline", s(&base)]);
    assert_eq!(code, 1);
    assert!(
        out.lines()
            .any(|l| l.starts_with("anomaly: kind: COMPARATOR_L_INFTY_HIGH")),
        "{out}"
    );
    assert!(out.contains("2 anomalies"), "{out}");
    // The categories moved 0.2 of the mass: above the default bar, not above 0.3.
    let (code, out, _) = run([
        "verify",
        s(&drifted),
        "--baseline",
        s(&base),
        "--threshold",
        "seconds=1",
        "--threshold",
        "kind=0.3",
    ]);
    assert_eq!(code, 0, "{out}");
    // A baseline that cannot be read: exit 2, named.
    let bogus = dir.join("bogus.pb");
    std::fs::write(&bogus, b"\xff\xff not statistics").unwrap();
    for (b, needle) in [
        (bogus.clone(), "bogus.pb"),
        (dir.join("nowhere"), "nowhere"),
    ] {
        let (code, _, err) = run(["verify", s(&resample), "--baseline", s(&b)]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(needle) && err.contains("--baseline"), "{err}");
    }
    let (code, _, err) = run([
        "verify",
        s(&resample),
        "--baseline",
        s(&base),
        "--threshold",
        "kind",
    ]);
    assert_eq!(code, 2, "{err}");
}

/// A browser on PATH (Debian's `chromium`, which `.ci/run` installs).
fn chromium() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| ["chromium", "chromium-browser", "google-chrome"].map(|n| d.join(n)))
        .find(|p| p.is_file())
}

/// `stats --html`: a real browser (headless Chromium, no network) draws every feature's
/// chart: each feature's bars are of a colour of their own, and every one is found in
/// the screenshot, the baseline's beside them in a lighter shade.
#[test]
fn the_page_draws_every_features_chart_in_a_browser() {
    let Some(browser) = chromium() else {
        if std::env::var_os("TFSHARD_REQUIRE_SERVERS").is_some() {
            panic!("TFSHARD_REQUIRE_SERVERS is set but no chromium is on PATH");
        }
        eprintln!("skipped: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let dir = scratch("stats-html");
    let out = dir.join("out");
    let (code, _, err) = convert_parquet(
        &root().join("testdata/small.parquet"),
        &out,
        &["--stats", "--quiet"],
    );
    assert_eq!(code, 0, "{err}");
    let page = dir.join("page.html");
    let (code, _, err) = run([
        "stats",
        s(&out),
        "--baseline",
        s(&out),
        "--html",
        s(&page),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    let features = stats_json(&[s(&out)])["features"].as_array().unwrap().len();
    let height = tfshard::stats::html::HEADER_HEIGHT
        + features as u32 * tfshard::stats::html::SECTION_HEIGHT
        + 40;
    let shot = dir.join("page.png");
    let profile = dir.join("profile");
    let status = std::process::Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size=1000,{height}"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{browser:?} exited {status}");
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.color_type.samples();
    let count = |rgb: (u8, u8, u8)| {
        pixels[..info.buffer_size()]
            .chunks_exact(channels)
            .filter(|p| (p[0], p[1], p[2]) == rgb)
            .count()
    };
    for i in 0..features {
        let (r, g, b) = tfshard::stats::html::colour(i);
        let light = (
            ((u16::from(r) + 255) / 2) as u8,
            ((u16::from(g) + 255) / 2) as u8,
            ((u16::from(b) + 255) / 2) as u8,
        );
        let (set, base) = (count((r, g, b)), count(light));
        assert!(
            set >= 100 && base >= 100,
            "feature {i}: {set} pixels of its bars, {base} of the baseline's"
        );
    }
}

/// `schema --format tfdv` infers a TFDV schema from the statistics; `verify --schema`
/// reads one (TFDV's text format): the set it came from passes, one whose columns moved
/// breaks it, naming each feature; a schema that does not parse is a usage error naming
/// its line.
#[test]
fn a_tfdv_schema_is_inferred_and_checked() {
    let dir = scratch("stats-schema");
    let input = root().join("testdata/small.parquet");
    let (base, swapped) = (dir.join("base"), dir.join("swapped"));
    let (code, _, err) = convert_parquet(&input, &base, &["--stats", "--quiet"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = convert_parquet(
        &input,
        &swapped,
        &[
            "--stats",
            "--quiet",
            "--rename",
            "price=cost",
            "--rename",
            "score=price",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, text, err) = run(["schema", s(&base), "--format", "tfdv"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(
            "feature {\n  name: \"price\"\n  type: FLOAT\n  presence {\n    min_fraction: 1.0"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "string_domain {\n  name: \"meta/source\"\n  value: \"app\"\n  value: \"web\"\n}"
        ),
        "{text}"
    );
    let schema = dir.join("schema.pbtxt");
    std::fs::write(&schema, &text).unwrap();
    let (code, out, err) = run(["verify", s(&base), "--schema", s(&schema)]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = run(["verify", s(&swapped), "--schema", s(&schema), "--json"]);
    assert_eq!(code, 1, "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let kinds: Vec<(String, String)> = report["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["feature"].as_str().unwrap().to_owned(),
                a["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (
                "price".to_owned(),
                "FEATURE_TYPE_LOW_FRACTION_PRESENT".to_owned()
            ),
            ("score".to_owned(), "SCHEMA_MISSING_COLUMN".to_owned()),
            ("cost".to_owned(), "SCHEMA_NEW_COLUMN".to_owned()),
        ],
        "{out}"
    );
    std::fs::write(&schema, "feature {\n  name: \"x\"\n  kind: INT\n}\n").unwrap();
    let (code, _, err) = run(["verify", s(&base), "--schema", s(&schema)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("schema.pbtxt") && err.contains("line 3"),
        "{err}"
    );
}
