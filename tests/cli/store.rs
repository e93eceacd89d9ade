//! Object storage against a real S3-protocol server on 127.0.0.1 (moto in server mode),
//! started here. Without moto these tests say they were skipped; `.ci/run`
//! installs it (`scripts/s3_venv.sh`) and sets `TFSHARD_REQUIRE_SERVERS=1`, so there a
//! missing server fails.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{root, scratch, wait_for_failpoint};

/// The S3 test venv (moto, boto3): `TFSHARD_S3_VENV`, else `.venv-s3` in the repo.
pub(crate) fn venv() -> Option<PathBuf> {
    let dir = std::env::var_os("TFSHARD_S3_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv-s3"));
    dir.join("bin/moto_server").exists().then_some(dir)
}

pub(crate) struct Server {
    pub(crate) endpoint: String,
    _child: Child,
}

impl Server {
    /// A started server at `endpoint`, stopped with `child`.
    pub(crate) fn new(endpoint: String, child: Child) -> Server {
        Server {
            endpoint,
            _child: child,
        }
    }
}

/// Waits until a server started as `what` listens on `port` of 127.0.0.1 (a start-up
/// guard, not a timing assertion).
pub(crate) fn wait_for(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A command for a server that must not outlive the tests: it runs under `sh`, which
/// kills it when its stdin, a pipe the spawned child holds, closes: when the `Server`
/// is dropped or the test process ends. (A `Child` in a static is never dropped, and
/// dropping one does not kill it: every `cargo test` left its servers running.)
pub(crate) fn tied(program: &Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(
            r#""$0" "$@" & server=$!; cat > /dev/null; kill "$server" 2>/dev/null; wait "$server""#,
        )
        .arg(program)
        .stdin(Stdio::piped());
    cmd
}

fn start_moto(venv: &Path, extra_env: &[(&str, &str)]) -> Server {
    let port = free_port();
    let mut cmd = tied(&venv.join("bin/moto_server"));
    cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("start moto_server");
    wait_for(port, "moto_server");
    Server {
        endpoint: format!("http://127.0.0.1:{port}"),
        _child: child,
    }
}

/// The shared server, or `None` (the test prints that it was skipped).
fn server() -> Option<&'static Server> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let Some(venv) = venv() else {
                if std::env::var_os("TFSHARD_REQUIRE_SERVERS").is_some() {
                    panic!("TFSHARD_REQUIRE_SERVERS is set but moto_server is missing (scripts/s3_venv.sh)");
                }
                return None;
            };
            Some(start_moto(&venv, &[]))
        })
        .as_ref()
}

macro_rules! need_server {
    () => {
        match server() {
            Some(s) => s,
            None => {
                eprintln!("skipped: no S3 server (run scripts/s3_venv.sh to install moto)");
                return;
            }
        }
    };
}

fn env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing-secret-key".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ENDPOINT_URL", endpoint.into()),
        ("AWS_ALLOW_HTTP", "true".into()),
    ]
}

/// Runs the plain S3 client (scripts/s3_client.py); returns stdout.
fn client(endpoint: &str, args: &[&str]) -> String {
    let venv = venv().expect("checked by need_server");
    let out = Command::new(venv.join("bin/python"))
        .arg(root().join("scripts/s3_client.py"))
        .args(args)
        .envs(env(endpoint))
        .output()
        .expect("run s3_client.py");
    assert!(
        out.status.success(),
        "s3_client {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs tfshard with `envs` (and a scratch TMPDIR); returns (exit code, stdout, stderr).
pub(crate) fn tfshard_env(envs: &[(&str, String)], args: &[&str]) -> (i32, String, String) {
    let out = Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(args)
        .env("TMPDIR", scratch_tmp())
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run tfshard");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs tfshard against the S3 server at `endpoint`.
fn tfshard_at(endpoint: &str, args: &[&str]) -> (i32, String, String) {
    tfshard_env(&env(endpoint), args)
}

fn scratch_tmp() -> PathBuf {
    let dir = root().join("target/test-scratch/store-tmp");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fresh bucket for one test.
fn bucket(s: &Server, name: &str) -> String {
    client(&s.endpoint, &["mb", name]);
    name.to_owned()
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    crate::shard_files(dir)
}

/// The streamed reader of Parquet in a store decodes every file of the corpora as the
/// local reader does: the same shards, or the same one-line error (never a panic).
/// (Row groups above the read-ahead budget stream in pieces.)
#[test]
fn every_corpus_file_converts_from_s3_as_from_disk() {
    let s = need_server!();
    let b = bucket(s, "corpus");
    let corpora = [
        ("testing", crate::convert::corpus()),
        ("corrupt", root().join("testdata/parquet-corrupt")),
    ];
    let mut failures = Vec::new();
    let mut compared = 0;
    for (name, dir) in &corpora {
        client(&s.endpoint, &["put-dir", dir.to_str().unwrap(), &b, name]);
        let mut files: Vec<PathBuf> = walkdir::WalkDir::new(dir)
            .into_iter()
            .map(|e| e.unwrap().into_path())
            .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
            .collect();
        files.sort();
        for (i, file) in files.iter().enumerate() {
            let rel = file.strip_prefix(dir).unwrap().to_str().unwrap();
            let url = format!("s3://{b}/{name}/{rel}");
            let local_out = scratch(&format!("s3-corpus-{name}-{i}-local"));
            let remote_out = scratch(&format!("s3-corpus-{name}-{i}-s3"));
            let run = |input: &str, out: &Path| {
                // Column chunks stream in pieces of 2 KiB (pages and their headers
                // straddle pieces), not whole as these small files' would.
                let mut envs = env(&s.endpoint);
                envs.push(("TFSHARD_READ_AHEAD_BYTES", "4096".into()));
                tfshard_env(
                    &envs,
                    &[
                        "convert",
                        "parquet",
                        input,
                        "-o",
                        out.to_str().unwrap(),
                        "--quiet",
                    ],
                )
            };
            let (local_code, _, local_err) = run(file.to_str().unwrap(), &local_out);
            let (code, _, err) = run(&url, &remote_out);
            compared += 1;
            let err_as_local = err.replace(&url, file.to_str().unwrap());
            if code != local_code || err.contains("panicked") {
                failures.push(format!(
                    "{rel}: exit {code} from S3, {local_code} from disk: {err}{local_err}"
                ));
            } else if code == 0 && files_of(&remote_out) != files_of(&local_out) {
                failures.push(format!("{rel}: other shards from S3"));
            } else if code != 0 && err_as_local != local_err {
                failures.push(format!(
                    "{rel}: from S3 {err_as_local:?}, from disk {local_err:?}"
                ));
            }
        }
    }
    assert!(compared > 90, "{compared} files");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    if dir.join("data.manifest.json").exists() {
        files(dir)
    } else {
        Vec::new()
    }
}

#[test]
fn s3_to_s3_disk_to_s3_and_s3_to_disk_write_the_same_shards() {
    let s = need_server!();
    let b = bucket(s, "roundtrip");
    let table = root().join("testdata/hive");
    client(
        &s.endpoint,
        &["put-dir", table.to_str().unwrap(), &b, "tables/hive"],
    );
    // (With statistics: each shard's partial goes up beside it, the set's file with the
    // manifest, byte for byte as on disk.)
    let small = ["--target-shard-size", "2KiB", "--stats"];

    // The reference: disk to disk.
    let local = on_disk(s, &table, "s3-local", &small);
    let want = files(&local);
    assert!(want.len() > 1, "several shards");

    let src = format!("s3://{b}/tables/hive");
    for (input, output, name) in [
        (src.clone(), format!("s3://{b}/out/s3-s3"), "s3-s3"),
        (
            table.to_str().unwrap().to_owned(),
            format!("s3://{b}/out/disk-s3"),
            "disk-s3",
        ),
        (
            format!("s3a://{b}/tables/hive/"),
            scratch("s3-disk").to_str().unwrap().to_owned(),
            "s3-disk",
        ),
    ] {
        let (code, out, err) = tfshard_at(
            &s.endpoint,
            &[
                &["convert", "parquet", &input, "-o", &output, "--json"][..],
                &small,
            ]
            .concat(),
        );
        assert_eq!(code, 0, "{name}: {err}");
        let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(summary["records"], 24, "{name}");
        let got_dir = if output.starts_with("s3://") {
            let d = scratch(&format!("s3-get-{name}"));
            let prefix = output.trim_start_matches(&format!("s3://{b}/"));
            client(&s.endpoint, &["get-dir", &b, prefix, d.to_str().unwrap()]);
            d
        } else {
            PathBuf::from(&output)
        };
        assert_eq!(
            files(&got_dir),
            want,
            "{name}: shards differ from the disk run"
        );
        // Nothing but the shards and the manifest: no temporaries left behind.
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(got_dir.join("data.manifest.json")).unwrap())
                .unwrap();
        let shards = want
            .iter()
            .filter(|(n, _)| n.ends_with(".tfrecord"))
            .count();
        assert_eq!(manifest["shards"].as_array().unwrap().len(), shards);
        assert!(
            shards > 1 && want.len() == 2 * shards + 1,
            "{name}: a partial each, and the set's statistics"
        );
        if input.starts_with("s3") {
            assert!(
                manifest["inputs"][0]["etag"].is_string(),
                "{name}: inputs record ETags"
            );
            assert!(manifest["inputs"][0]["path"]
                .as_str()
                .unwrap()
                .starts_with("s3://"));
        }
    }
    let keys = client(&s.endpoint, &["ls", &b, "out/"]);
    assert!(!keys.contains("tfshard-tmp"), "temporaries left: {keys}");
    assert_eq!(
        client(&s.endpoint, &["uploads", &b]),
        "",
        "pending multipart uploads"
    );

    // Readers on the store.
    let out = format!("s3://{b}/out/s3-s3");
    let (code, stdout, err) = tfshard_at(&s.endpoint, &["verify", &out, "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        stdout.contains("\"ok\":true") || stdout.contains("\"ok\": true"),
        "{stdout}"
    );
    let (code, stdout, err) = tfshard_at(&s.endpoint, &["inspect", &out, "--limit", "2"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(stdout.lines().count(), 2);
    let (code, stdout, err) = tfshard_at(&s.endpoint, &["schema", &out]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("\"city\""), "{stdout}");
    let (code, stdout, err) = tfshard_at(&s.endpoint, &["stats", &out, "--json"]);
    assert_eq!(code, 0, "{err}");
    let (_, on_disk_stats, _) =
        tfshard_at(&s.endpoint, &["stats", local.to_str().unwrap(), "--json"]);
    assert_eq!(
        stdout, on_disk_stats,
        "the stored statistics, read from the store"
    );
    let (code, stdout, err) = tfshard_at(&s.endpoint, &["bench", &out, "--json", "--epochs", "1"]);
    assert_eq!(code, 0, "{err}");
    let bench: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(bench["records"], 24);

    // A corrupted object: verify names it and exits 1.
    let first = client(&s.endpoint, &["ls", &b, "out/s3-s3/data-00000"]);
    let key = first.lines().next().unwrap();
    client(&s.endpoint, &["flip", &b, key, "20"]);
    let (code, stdout, _) = tfshard_at(&s.endpoint, &["verify", &out, "--json"]);
    assert_eq!(code, 1);
    assert!(stdout.contains("data-00000"), "{stdout}");
    assert!(
        stdout.contains("CRC mismatch") || stdout.contains("crc32c mismatch"),
        "{stdout}"
    );
}

#[test]
fn store_errors_are_one_clear_line() {
    let s = need_server!();
    let small = root().join("testdata/small.parquet");
    let small = small.to_str().unwrap();

    // A missing bucket.
    let (code, _, err) = tfshard_at(
        &s.endpoint,
        &[
            "convert",
            "parquet",
            "s3://no-such-bucket/t/",
            "-o",
            scratch("s3-err").to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("s3://no-such-bucket/t") && err.contains("not found"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains("testing-secret-key"));

    // An output that is not empty.
    let b = bucket(s, "errors");
    let (code, _, err) = tfshard_at(
        &s.endpoint,
        &["convert", "parquet", small, "-o", &format!("s3://{b}/o")],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = tfshard_at(
        &s.endpoint,
        &["convert", "parquet", small, "-o", &format!("s3://{b}/o")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not empty"), "{err}");
    let (code, _, err) = tfshard_at(
        &s.endpoint,
        &[
            "convert",
            "parquet",
            small,
            "-o",
            &format!("s3://{b}/o"),
            "--overwrite",
        ],
    );
    assert_eq!(code, 0, "{err}");

    // A Delta table on the store: refused, naming the prefix.
    let delta = root().join("testdata/delta-table");
    client(
        &s.endpoint,
        &["put-dir", delta.to_str().unwrap(), &b, "delta"],
    );
    let (code, _, err) = tfshard_at(
        &s.endpoint,
        &[
            "convert",
            "parquet",
            &format!("s3://{b}/delta"),
            "-o",
            scratch("s3-delta").to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("s3://{b}/delta")) && err.contains("tfshard convert delta"),
        "{err}"
    );

    // A stopped server: nothing listens on the port.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let (code, _, err) = tfshard_at(
        &dead,
        &[
            "convert",
            "parquet",
            "s3://b/t/",
            "-o",
            scratch("s3-dead").to_str().unwrap(),
            "--io-timeout",
            "2s",
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot reach endpoint"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    // A server that accepts connections and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        for c in silent.incoming().take(64) {
            conns.push(c);
        }
    });
    let (code, _, err) = tfshard_at(&endpoint, &["verify", "s3://b/out/", "--io-timeout", "2s"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot reach endpoint"), "{err}");
    drop(held);
}

#[test]
fn two_runs_racing_for_one_output_publish_once() {
    let s = need_server!();
    let b = bucket(s, "race");
    let small = root().join("testdata/small.parquet");
    let out = format!("s3://{b}/out");
    let spawn = || {
        Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
            .args([
                "convert",
                "parquet",
                small.to_str().unwrap(),
                "-o",
                &out,
                "--target-shard-size",
                "1KiB",
            ])
            .envs(env(&s.endpoint))
            .env("TMPDIR", scratch_tmp())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, c) = (spawn(), spawn());
    let (a, c) = (a.wait_with_output().unwrap(), c.wait_with_output().unwrap());
    let codes = [a.status.code(), c.status.code()];
    assert!(
        codes.contains(&Some(0)) && codes.contains(&Some(1)),
        "{codes:?}"
    );
    let loser = if a.status.code() == Some(1) { &a } else { &c };
    let err = String::from_utf8_lossy(&loser.stderr);
    assert!(
        err.contains("another run is publishing") || err.contains("not empty"),
        "{err}"
    );
    let (code, _, err) = tfshard_at(&s.endpoint, &["verify", &out]);
    assert_eq!(code, 0, "{err}");
    let keys = client(&s.endpoint, &["ls", &b, "out/"]);
    assert!(!keys.contains("tfshard-tmp"), "{keys}");
    assert_eq!(client(&s.endpoint, &["uploads", &b]), "");
}

/// A run that found the output empty, while another published there and
/// released its claim, must not touch that set when it commits (its copies would land
/// on the published names): it fails with the claim's line, and the set stays whole.
#[test]
fn a_run_that_finds_a_set_published_since_it_began_leaves_it_whole() {
    let s = need_server!();
    let b = bucket(s, "late");
    let small = root().join("testdata/small.parquet");
    let out = format!("s3://{b}/out");
    let args = [
        "convert",
        "parquet",
        small.to_str().unwrap(),
        "-o",
        &out,
        "--target-shard-size",
        "40KB",
    ];
    let gate = scratch("s3-late").join("gate");
    let _ = std::fs::remove_file(&gate);
    let mut late = tfshard_held(&s.endpoint, "convert:written", &gate, &args);
    wait_for_failpoint(&mut late, &gate, "the late run's records written");
    let (code, _, err) = tfshard_at(&s.endpoint, &args);
    assert_eq!(code, 0, "{err}");
    // The published set (the late run's hidden temporaries aside, which go with it).
    let visible = |listing: String| -> Vec<String> {
        listing
            .lines()
            .filter(|k| !k.starts_with("out/."))
            .map(str::to_owned)
            .collect()
    };
    let published = visible(client(&s.endpoint, &["etags", &b, "out/"]));
    assert!(published.len() > 2, "{published:?}");
    std::fs::write(&gate, "").unwrap();
    let output = late.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains("another run is publishing"), "{err}");
    assert_eq!(
        client(&s.endpoint, &["etags", &b, "out/"])
            .lines()
            .collect::<Vec<_>>(),
        published
    );
    let (code, _, err) = tfshard_at(&s.endpoint, &["verify", &out]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(client(&s.endpoint, &["uploads", &b]), "");
}

/// A Parquet file of `rows` rows of `bytes` random bytes each (incompressible, so the
/// shards are as large as the values).
fn blob_table(path: &Path, rows: usize, bytes: usize) {
    blob_table_in_groups(path, rows, bytes, rows);
}

/// [`blob_table`] in row groups of `group_rows` rows (workers split by row groups).
fn blob_table_in_groups(path: &Path, rows: usize, bytes: usize, group_rows: usize) {
    use std::sync::Arc;
    let mut seed = 0x9e3779b97f4a7c15u64;
    let values: Vec<Vec<u8>> = (0..rows)
        .map(|_| {
            (0..bytes)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect()
        })
        .collect();
    let array = arrow_array::BinaryArray::from_iter_values(values.iter().map(|v| v.as_slice()));
    let batch = arrow_array::RecordBatch::try_from_iter([(
        "blob",
        Arc::new(array) as arrow_array::ArrayRef,
    )])
    .unwrap();
    let file = std::fs::File::create(path).unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(group_rows))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

#[test]
fn sigterm_during_an_upload_leaves_nothing() {
    let s = need_server!();
    let b = bucket(s, "sigterm");
    let input = scratch("s3-sigterm-in").join("blobs.parquet");
    blob_table(&input, 96, 512 << 10);
    let out = format!("s3://{b}/out");
    // The run stops right after its first multipart upload has started (and its id is
    // recorded); SIGTERM comes then.
    let gate = scratch("s3-sigterm-gate").join("go");
    let mut child = tfshard_held(
        &s.endpoint,
        "store:uploading",
        &gate,
        &[
            "convert",
            "parquet",
            input.to_str().unwrap(),
            "-o",
            &out,
            "--target-shard-size",
            "24MiB",
        ],
    );
    wait_for_failpoint(&mut child, &gate, "an upload started");
    let pending = client(&s.endpoint, &["uploads", &b]).lines().count();
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    std::fs::write(&gate, "").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(pending >= 1, "an upload was pending when the signal came");
    assert_eq!(
        output.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(client(&s.endpoint, &["ls", &b, "out/"]), "", "objects left");
    assert_eq!(
        client(&s.endpoint, &["uploads", &b]),
        "",
        "pending multipart uploads"
    );
}

/// Runs tfshard with failure points set; returns (exit code, stderr).
/// Starts tfshard against the S3 server at `endpoint`, to stop at failure point `point`
/// until `gate` exists (`wait_for_failpoint` waits for it to get there).
fn tfshard_held(endpoint: &str, point: &str, gate: &Path, args: &[&str]) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(args)
        .envs(env(endpoint))
        .env("TMPDIR", scratch_tmp())
        .env(
            "TFSHARD_FAILPOINTS",
            format!("{point}=wait:{}", gate.display()),
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tfshard")
}

fn tfshard_with_failpoints(endpoint: &str, failpoints: &str, args: &[&str]) -> (i32, String) {
    let mut envs = env(endpoint);
    envs.push(("TFSHARD_FAILPOINTS", failpoints.to_owned()));
    let (code, _, err) = tfshard_env(&envs, args);
    (code, err)
}

#[test]
fn an_input_replaced_during_the_run_is_an_error() {
    let s = need_server!();
    let b = bucket(s, "replaced");
    let inputs = scratch("s3-replaced-in");
    std::fs::copy(
        root().join("testdata/small.parquet"),
        inputs.join("a.parquet"),
    )
    .unwrap();
    client(
        &s.endpoint,
        &["put-dir", inputs.to_str().unwrap(), &b, "in"],
    );
    let gate = scratch("s3-replaced-gate").join("go");
    let out = scratch("s3-replaced-out");
    let input = format!("s3://{b}/in");
    let args = ["convert", "parquet", &input, "-o", out.to_str().unwrap()];
    let mut child = tfshard_held(&s.endpoint, "convert:planned", &gate, &args);
    // The footers are read (and their ETags taken); now the object changes.
    wait_for_failpoint(&mut child, &gate, "the footers were read");
    let other = scratch("s3-replaced-other");
    let hive_file = std::fs::read_dir(root().join("testdata/hive/year=2020"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("part-0.parquet");
    std::fs::copy(hive_file, other.join("a.parquet")).unwrap();
    client(&s.endpoint, &["put-dir", other.to_str().unwrap(), &b, "in"]);
    std::fs::write(&gate, "").unwrap();
    let output = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("s3://{b}/in/a.parquet")) && err.contains("changed during the run"),
        "{err}"
    );
    assert!(!out.join("data.manifest.json").exists());
}

/// On S3 a shard's parts go up streamed from the staged file (no part buffers), each
/// with its CRC32C; `AWS_REQUEST_CHECKSUM_CALCULATION=when_required` sends them without,
/// and `TFSHARD_STREAM_PARTS=0` through object_store's own upload. Every way gives the
/// same objects, byte for byte, as the same conversion on disk; a checksummed one
/// carries the composite of its parts' CRC32Cs, as the store computed it.
#[test]
fn parts_streamed_from_the_file_equal_object_stores_own_upload() {
    let s = need_server!();
    let b = bucket(s, "streamed-parts");
    let input = scratch("s3-streamed-in").join("blobs.parquet");
    blob_table(&input, 40, 512 << 10);
    let size = ["--target-shard-size", "17MiB"];
    let local = on_disk(s, &input, "s3-streamed-local", &size);
    for (name, var, value, checksummed) in [
        ("streamed", "TFSHARD_STREAM_PARTS", "1", true),
        (
            "unchecked",
            "AWS_REQUEST_CHECKSUM_CALCULATION",
            "WHEN_REQUIRED",
            false,
        ),
        ("buffered", "TFSHARD_STREAM_PARTS", "0", false),
    ] {
        let out = format!("s3://{b}/{name}");
        let mut envs = env(&s.endpoint);
        envs.push((var, value.into()));
        let args = [
            &["convert", "parquet", input.to_str().unwrap(), "-o", &out][..],
            &size,
        ]
        .concat();
        let (code, _, err) = tfshard_env(&envs, &args);
        assert_eq!(code, 0, "{name}: {err}");
        let got = scratch(&format!("s3-streamed-got-{name}"));
        client(&s.endpoint, &["get-dir", &b, name, got.to_str().unwrap()]);
        assert_eq!(files(&got), files(&local), "{name}");
        // A 17 MiB shard went up as 3 parts of 8 MiB at most.
        assert!(
            files(&got)[0].1.len() > 16 << 20,
            "{name}: a shard of three parts"
        );
        let checksums = client(&s.endpoint, &["checksums", &b, &format!("{name}/")]);
        for (file, bytes) in files(&local) {
            if !file.ends_with(".tfrecord") {
                continue;
            }
            // (moto's copy to the final name keeps the value but not its `-PARTS`.)
            let expected = match checksummed {
                true => composite_crc32c(&bytes, 8 << 20),
                false => "-".to_owned(),
            };
            let line = format!("{name}/{file} {expected}");
            let base = line.rsplit_once('-').map_or(&line[..], |(b, _)| b);
            assert!(
                checksums.lines().any(|l| l == line || l == base),
                "{line} not in\n{checksums}"
            );
        }
    }
    assert_eq!(client(&s.endpoint, &["uploads", &b]), "");
}

/// S3's composite checksum of an object uploaded in parts of `part` bytes: the CRC32C
/// of the parts' CRC32Cs (big-endian), in base64, then `-PARTS`.
fn composite_crc32c(bytes: &[u8], part: usize) -> String {
    use base64::Engine as _;
    let crcs: Vec<u8> = bytes
        .chunks(part)
        .flat_map(|c| crc32c::crc32c(c).to_be_bytes())
        .collect();
    let text =
        base64::engine::general_purpose::STANDARD.encode(crc32c::crc32c(&crcs).to_be_bytes());
    format!("{text}-{}", bytes.len().div_ceil(part))
}

/// Where a shard's final name is known when its upload starts (`--min-shards`
/// cuts the output into a count fixed before its shards are written), the shard goes up
/// under that name and is completed at the commit: no temporary, no copy (a multipart
/// object's ETag ends in `-PARTS`; a copy's does not). Into a new output and with
/// `--overwrite`, the same bytes as on disk.
#[test]
fn shards_whose_names_are_known_are_uploaded_under_them() {
    let s = need_server!();
    let b = bucket(s, "final-names");
    let input = scratch("s3-final-names-in").join("blobs.parquet");
    blob_table(&input, 24, 512 << 10);
    let flags = ["--min-shards", "3"];
    let local = on_disk(s, &input, "s3-final-names-local", &flags);
    let out = format!("s3://{b}/out");
    for extra in [&[][..], &["--overwrite"][..]] {
        let args = [
            &["convert", "parquet", input.to_str().unwrap(), "-o", &out][..],
            &flags,
            extra,
        ]
        .concat();
        let (code, _, err) = tfshard_at(&s.endpoint, &args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        let etags = client(&s.endpoint, &["etags", &b, "out/"]);
        let shards: Vec<&str> = etags.lines().filter(|l| l.contains(".tfrecord")).collect();
        assert_eq!(shards.len(), 3, "{etags}");
        assert!(
            shards.iter().all(|l| l.ends_with("-1")),
            "{extra:?}: {etags}"
        );
        let got = scratch("s3-final-names-got");
        client(&s.endpoint, &["get-dir", &b, "out", got.to_str().unwrap()]);
        assert_eq!(files(&got), files(&local), "{extra:?}");
        assert_eq!(client(&s.endpoint, &["uploads", &b]), "");
        assert!(!client(&s.endpoint, &["ls", &b, "out/"]).contains("tfshard-tmp"));
    }
    // Killed with such an upload open, recorded or not yet: the rerun with --overwrite
    // aborts it (by its record, or found pending under its final name).
    for kill in ["store:uploading", "store:created"] {
        let out = format!("s3://{b}/killed-{}", &kill[6..]);
        let args = [
            &["convert", "parquet", input.to_str().unwrap(), "-o", &out][..],
            &flags,
        ]
        .concat();
        let (code, err) = tfshard_with_failpoints(&s.endpoint, &format!("{kill}=exit"), &args);
        assert_eq!(code, 137, "{kill}: {err}");
        let pending = client(&s.endpoint, &["uploads", &b]);
        assert!(
            pending.starts_with(&format!("killed-{}/data-0000", &kill[6..])),
            "{kill}: {pending}"
        );
        let (code, _, err) = tfshard_at(&s.endpoint, &[&args[..], &["--overwrite"]].concat());
        assert_eq!(code, 0, "{kill}: {err}");
        assert_eq!(client(&s.endpoint, &["uploads", &b]), "", "{kill}");
    }
}

/// The shard the writer finds the last while it is written (the records still to come
/// fit in it) is held back and goes up under its final name once the count is known:
/// completed at the commit, not copied (a multipart object's ETag ends in `-PARTS`; a
/// copy's does not). The shards before it are streamed and copied. Into a new output
/// and with `--overwrite`, the same bytes as on disk.
#[test]
fn the_last_shard_goes_up_under_its_final_name() {
    let s = need_server!();
    let b = bucket(s, "last-final");
    let input = scratch("s3-last-final-in").join("blobs.parquet");
    // 40 rows of 512 KiB in 17 MiB shards: 33 rows, then 7.
    blob_table(&input, 40, 512 << 10);
    let size = ["--target-shard-size", "17MiB"];
    let local = on_disk(s, &input, "s3-last-final-local", &size);
    let out = format!("s3://{b}/out");
    for extra in [&[][..], &["--overwrite"][..]] {
        let args = [
            &["convert", "parquet", input.to_str().unwrap(), "-o", &out][..],
            &size,
            extra,
        ]
        .concat();
        let (code, _, err) = tfshard_at(&s.endpoint, &args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        let etags = client(&s.endpoint, &["etags", &b, "out/"]);
        let etag = |name: &str| {
            etags
                .lines()
                .find_map(|l| l.strip_prefix(&format!("out/{name} ")))
                .unwrap_or_else(|| panic!("{name} not in {etags}"))
                .to_owned()
        };
        assert!(
            !etag("data-00000-of-00002.tfrecord").contains('-'),
            "{etags}"
        );
        assert!(
            etag("data-00001-of-00002.tfrecord").ends_with("-1"),
            "{etags}"
        );
        let got = scratch("s3-last-final-got");
        client(&s.endpoint, &["get-dir", &b, "out", got.to_str().unwrap()]);
        assert_eq!(files(&got), files(&local), "{extra:?}");
        assert_eq!(client(&s.endpoint, &["uploads", &b]), "");
        assert!(!client(&s.endpoint, &["ls", &b, "out/"]).contains("tfshard-tmp"));
    }
}

/// A plain rerun into the output a killed run left (hidden objects, an upload
/// it never recorded) publishes, then clears what the killed run left: the bucket holds
/// the set and nothing else.
#[test]
fn a_rerun_that_publishes_clears_what_a_killed_run_left() {
    let s = need_server!();
    let b = bucket(s, "rerun-clears");
    let input = scratch("s3-rerun-clears-in").join("blobs.parquet");
    blob_table(&input, 24, 512 << 10);
    let local = scratch("s3-rerun-clears-local");
    let (code, _, err) = tfshard_at(
        &s.endpoint,
        &[
            "convert",
            "parquet",
            input.to_str().unwrap(),
            "-o",
            local.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let out = format!("s3://{b}/out");
    let args = ["convert", "parquet", input.to_str().unwrap(), "-o", &out];
    let (code, err) = tfshard_with_failpoints(&s.endpoint, "store:created=exit", &args);
    assert_eq!(code, 137, "{err}");
    assert_eq!(client(&s.endpoint, &["uploads", &b]).lines().count(), 1);
    // Killed before it claimed the output (the claim comes at the commit): nothing of
    // it is visible, and the plain rerun may publish.
    let (code, _, err) = tfshard_at(&s.endpoint, &args);
    assert_eq!(code, 0, "{err}");
    only_the_set(s, &b, &local, "s3-rerun-clears-got", "rerun");
}

#[test]
fn a_killed_upload_is_aborted_by_the_next_overwrite_run() {
    let s = need_server!();
    let b = bucket(s, "killed");
    let input = scratch("s3-killed-in").join("blobs.parquet");
    blob_table(&input, 24, 512 << 10);
    let out = format!("s3://{b}/out");
    let args = ["convert", "parquet", input.to_str().unwrap(), "-o", &out];
    // Killed with an upload started: a pending upload, objects only under the hidden prefix.
    let (code, err) = tfshard_with_failpoints(&s.endpoint, "store:uploading=exit", &args);
    assert_eq!(code, 137, "{err}");
    assert_eq!(client(&s.endpoint, &["uploads", &b]).lines().count(), 1);
    let keys = client(&s.endpoint, &["ls", &b, "out/"]);
    assert!(
        keys.lines()
            .all(|k| k.starts_with("out/.data.tfshard-tmp/")),
        "{keys}"
    );
    // Killed after the copies: final-named shards, no manifest (readers start from it).
    let (code, err) = tfshard_with_failpoints(
        &s.endpoint,
        "publish:placed=exit",
        &[&args[..], &["--overwrite"]].concat(),
    );
    assert_eq!(code, 137, "{err}");
    let keys = client(&s.endpoint, &["ls", &b, "out/"]);
    assert!(keys.contains("out/data-00000-of-00001.tfrecord"), "{keys}");
    assert!(!keys.contains("manifest"), "{keys}");
    // The rerun with --overwrite finishes the job and aborts what the killed runs left.
    let (code, _, err) = tfshard_at(&s.endpoint, &[&args[..], &["--overwrite"]].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(client(&s.endpoint, &["uploads", &b]), "", "pending uploads");
    let keys = client(&s.endpoint, &["ls", &b, "out/"]);
    assert_eq!(
        keys,
        "out/data-00000-of-00001.tfrecord\nout/data.manifest.json\n"
    );
    let (code, _, err) = tfshard_at(&s.endpoint, &["verify", &out]);
    assert_eq!(code, 0, "{err}");
}

/// Into an output holding none of the new names, each shard is copied to its
/// final name as soon as its own upload is done; a commit that fails after such copies
/// leaves no final-named shard (nor anything else) behind, and the next run publishes.
#[test]
fn a_failed_commit_removes_the_shards_it_copied_early() {
    let s = need_server!();
    let b = bucket(s, "early-copies");
    let input = scratch("s3-early-in").join("blobs.parquet");
    blob_table(&input, 24, 512 << 10);
    let out = format!("s3://{b}/out");
    let args = [
        "convert",
        "parquet",
        input.to_str().unwrap(),
        "-o",
        &out,
        "--target-shard-size",
        "9MiB",
    ];
    // Failed after the early copies, and failed in one upload while the commit waits
    // for the others (the waits dropped midway are waited for before the cleanup; the
    // first 9 MiB shard is a multipart upload, where the failure point is).
    for failpoint in ["store:uploaded=error", "store:uploading=error"] {
        let (code, err) = tfshard_with_failpoints(&s.endpoint, failpoint, &args);
        assert_eq!(code, 1, "{failpoint}: {err}");
        assert_eq!(client(&s.endpoint, &["ls", &b, "out/"]), "", "{failpoint}");
        assert_eq!(client(&s.endpoint, &["uploads", &b]), "", "{failpoint}");
    }
    let (code, _, err) = tfshard_at(&s.endpoint, &args);
    assert_eq!(code, 0, "{err}");
    let keys = client(&s.endpoint, &["ls", &b, "out/"]);
    assert!(
        keys.lines().filter(|k| k.ends_with(".tfrecord")).count() > 1,
        "{keys}"
    );
    let (code, _, err) = tfshard_at(&s.endpoint, &["verify", &out]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn throttling_that_outlasts_the_retries_is_one_line() {
    let s = need_server!();
    let _ = s;
    // A server that answers every request with S3's SlowDown.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while matches!(conn.read(&mut buf), Ok(n) if n > 0) {
                    let body = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
                    let reply = format!("HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                    if conn.write_all(reply.as_bytes()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let (code, _, err) = tfshard_at(&endpoint, &["verify", "s3://b/out/", "--io-timeout", "2s"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("s3://b/out") && err.contains("throttled"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn wrong_credentials_are_access_denied_and_never_printed() {
    let Some(venv) = venv() else {
        eprintln!("skipped: no S3 server (run scripts/s3_venv.sh to install moto)");
        return;
    };
    // A server of its own that checks signatures after the first three requests (the
    // bucket and an IAM user with a key, made here).
    let s = start_moto(&venv, &[("INITIAL_NO_AUTH_ACTION_COUNT", "3")]);
    client(&s.endpoint, &["mb", "authed"]);
    let key = client(&s.endpoint, &["create-key"]);
    let (id, _secret) = key.trim().split_once(' ').unwrap();
    let out = Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(["verify", "s3://authed/out/"])
        .envs(env(&s.endpoint))
        .env("AWS_ACCESS_KEY_ID", id)
        .env("AWS_SECRET_ACCESS_KEY", "wrong-secret-value-123")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("s3://authed/out") && err.contains("access denied"),
        "{err}"
    );
    assert!(err.contains("check the credentials"), "{err}");
    assert!(!err.contains("wrong-secret-value-123"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

// ---- Azure, against Azurite (npm) ----

/// `azurite-blob`: `TFSHARD_AZURITE`, else `.azurite/node_modules/.bin/azurite-blob`.
fn azurite_bin() -> Option<PathBuf> {
    let bin = std::env::var_os("TFSHARD_AZURITE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".azurite/node_modules/.bin/azurite-blob"));
    bin.exists().then_some(bin)
}

fn azurite() -> Option<&'static Server> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let (Some(bin), Some(_)) = (azurite_bin(), venv()) else {
                if std::env::var_os("TFSHARD_REQUIRE_SERVERS").is_some() {
                    panic!("TFSHARD_REQUIRE_SERVERS is set but Azurite is missing (scripts/azurite.sh)");
                }
                return None;
            };
            let port = free_port();
            let dir = scratch("azurite-data");
            let child = tied(&bin)
                .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string(), "--location"])
                .arg(&dir)
                .args(["--silent", "--skipApiVersionCheck", "--loose"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start azurite-blob");
            let deadline = Instant::now() + Duration::from_secs(60);
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "azurite did not start");
                std::thread::sleep(Duration::from_millis(100));
            }
            Some(Server {
                endpoint: format!("http://127.0.0.1:{port}"),
                _child: child,
            })
        })
        .as_ref()
}

fn az_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AZURE_STORAGE_USE_EMULATOR", "true".into()),
        ("AZURITE_BLOB_STORAGE_URL", endpoint.into()),
    ]
}

fn az_client(endpoint: &str, args: &[&str]) -> String {
    let out = Command::new(venv().unwrap().join("bin/python"))
        .arg(root().join("scripts/az_client.py"))
        .args(args)
        .envs(az_env(endpoint))
        .output()
        .expect("run az_client.py");
    assert!(
        out.status.success(),
        "az_client {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn tfshard_az(endpoint: &str, args: &[&str]) -> (i32, String, String) {
    tfshard_env(&az_env(endpoint), args)
}

#[test]
fn azure_round_trip_readers_and_errors() {
    let Some(s) = azurite() else {
        eprintln!("skipped: no Azurite (run scripts/azurite.sh to install it)");
        return;
    };
    az_client(&s.endpoint, &["mb", "tables"]);
    let table = root().join("testdata/hive");
    az_client(
        &s.endpoint,
        &["put-dir", table.to_str().unwrap(), "tables", "hive"],
    );
    let small = ["--target-shard-size", "2KiB"];
    let local = scratch("az-local");
    let (code, _, err) = tfshard_az(
        &s.endpoint,
        &[
            &[
                "convert",
                "parquet",
                table.to_str().unwrap(),
                "-o",
                local.to_str().unwrap(),
            ][..],
            &small,
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");

    // Azure to Azure, byte-identical to the disk run.
    let (code, _, err) = tfshard_az(
        &s.endpoint,
        &[
            &[
                "convert",
                "parquet",
                "az://tables/hive",
                "-o",
                "az://tables/out",
            ][..],
            &small,
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    let got = scratch("az-got");
    az_client(
        &s.endpoint,
        &["get-dir", "tables", "out", got.to_str().unwrap()],
    );
    assert_eq!(files(&got), files(&local));
    let keys = az_client(&s.endpoint, &["ls", "tables", "out/"]);
    assert!(!keys.contains("tfshard-tmp"), "{keys}");
    // Every shard but the last was copied into place, and the copy status the run waited
    // on says the copy completed (Azurite copies at once; Azure may answer "pending");
    // the last, held back as the last, went up under its final name: no copy.
    let status = az_client(&s.endpoint, &["copy-status", "tables", "out/"]);
    let shards: Vec<&str> = status.lines().filter(|l| l.contains(".tfrecord")).collect();
    let (last, copied) = shards.split_last().expect("shards");
    assert!(
        !copied.is_empty() && copied.iter().all(|l| l.ends_with(" success")),
        "{status}"
    );
    assert!(last.ends_with(" none"), "{status}");

    // Readers, and a second run racing the same output fails cleanly.
    let (code, _, err) = tfshard_az(&s.endpoint, &["verify", "az://tables/out"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = tfshard_az(&s.endpoint, &["inspect", "az://tables/out", "--limit", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"city\""), "{out}");
    let (code, _, err) = tfshard_az(
        &s.endpoint,
        &[
            "convert",
            "parquet",
            "az://tables/hive",
            "-o",
            "az://tables/out",
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not empty"), "{err}");
    let (code, _, err) = tfshard_az(
        &s.endpoint,
        &[
            "convert",
            "parquet",
            "az://tables/hive",
            "-o",
            "az://tables/out",
            "--overwrite",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = tfshard_az(&s.endpoint, &["verify", "az://tables/out"]);
    assert_eq!(code, 0, "{err}");

    // A missing container.
    let (code, _, err) = tfshard_az(
        &s.endpoint,
        &[
            "convert",
            "parquet",
            "az://nope/t",
            "-o",
            scratch("az-err").to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("az://nope/t") && err.contains("not found"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn a_shard_above_the_copy_limit_is_copied_in_parts() {
    let Some(venv) = venv() else {
        eprintln!("skipped: no S3 server (run scripts/s3_venv.sh to install moto)");
        return;
    };
    // Limits lowered for the test: shards above 100 KB count as above CopyObject's 5 GiB,
    // copied in parts of 50,000 bytes (a server of its own, whose smallest part is 1 byte
    // instead of S3's 5 MiB).
    let s = start_moto(&venv, &[("S3_UPLOAD_PART_MIN_SIZE", "1")]);
    let b = bucket(&s, "large");
    let small = root().join("testdata/small.parquet");
    let local = scratch("s3-large-local");
    let small = small.to_str().unwrap();
    fn convert<'a>(small: &'a str, out: &'a str) -> Vec<&'a str> {
        vec![
            "convert",
            "parquet",
            small,
            "-o",
            out,
            "--target-shard-size",
            "128KiB",
        ]
    }
    let (code, _, err) = tfshard_at(&s.endpoint, &convert(small, local.to_str().unwrap()));
    assert_eq!(code, 0, "{err}");
    let mut envs = env(&s.endpoint);
    envs.push(("TFSHARD_MAX_COPY_BYTES", "100000".into()));
    envs.push(("TFSHARD_COPY_PART_BYTES", "50000".into()));
    let out = format!("s3://{b}/out");
    // Killed with every part copied and the upload not completed: the upload is pending
    // and recorded; the next --overwrite run aborts it.
    let mut killed = envs.clone();
    killed.push(("TFSHARD_FAILPOINTS", "store:parts-copied=exit".into()));
    let (code, _, err) = tfshard_env(&killed, &convert(small, &out));
    assert_eq!(code, 137, "{err}");
    assert!(!client(&s.endpoint, &["uploads", &b]).is_empty());
    let overwrite = [&convert(small, &out)[..], &["--overwrite"]].concat();
    let (code, _, err) = tfshard_env(&envs, &overwrite);
    assert_eq!(code, 0, "{err}");
    let got = scratch("s3-large-got");
    client(&s.endpoint, &["get-dir", &b, "out", got.to_str().unwrap()]);
    assert_eq!(files(&got), files(&local));
    assert_eq!(client(&s.endpoint, &["uploads", &b]), "", "pending uploads");
    // A shard above the limit is a multipart object of ceil(size / 50,000) parts (its
    // ETag ends in -N); one below it a plain copy. (The last went up under its final
    // name: one part.)
    let etags = client(&s.endpoint, &["etags", &b, "out/"]);
    let count = etags.lines().filter(|l| l.contains(".tfrecord")).count();
    let last = format!("-{:05}-of-{count:05}.tfrecord ", count - 1);
    let (_, last_etag) = etags
        .lines()
        .find(|l| l.contains(&last))
        .unwrap()
        .split_once(' ')
        .unwrap();
    assert!(last_etag.ends_with("-1"), "{etags}");
    let mut above = 0;
    for line in etags
        .lines()
        .filter(|l| l.contains(".tfrecord") && !l.contains(&last))
    {
        let (key, etag) = line.split_once(' ').unwrap();
        let bytes = std::fs::metadata(got.join(key.trim_start_matches("out/")))
            .unwrap()
            .len();
        if bytes > 100_000 {
            above += 1;
            assert!(
                etag.ends_with(&format!("-{}", bytes.div_ceil(50_000))),
                "{line} ({bytes} bytes)"
            );
        } else {
            assert!(!etag.contains('-'), "{line} ({bytes} bytes)");
        }
    }
    assert!(above >= 1, "no shard above the limit: {etags}");
    assert!(!etags.contains("tfshard-tmp"), "{etags}");
    let (code, _, err) = tfshard_at(&s.endpoint, &["verify", &out]);
    assert_eq!(code, 0, "{err}");

    // finalize copies part shards the same way, recording the upload under the parts
    // folder: a finalize killed mid-copy leaves it pending, the rerun aborts it.
    let parts = format!("s3://{b}/w");
    for i in ["0", "1"] {
        let worker = [
            &convert(small, &parts)[..],
            &["--num-workers", "2", "--worker-index", i],
        ]
        .concat();
        let (code, _, err) = tfshard_env(&envs, &worker);
        assert_eq!(code, 0, "worker {i}: {err}");
    }
    let mut killed = envs.clone();
    killed.push(("TFSHARD_FAILPOINTS", "store:parts-copied=exit".into()));
    let (code, _, err) = tfshard_env(&killed, &["finalize", &parts]);
    assert_eq!(code, 137, "{err}");
    assert!(client(&s.endpoint, &["uploads", &b]).contains("w/data-"));
    let (code, _, err) = tfshard_env(&envs, &["finalize", &parts]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(client(&s.endpoint, &["uploads", &b]), "", "pending uploads");
    let keys = client(&s.endpoint, &["ls", &b, "w/"]);
    assert!(!keys.contains("tfshard-parts"), "{keys}");
    let (code, _, err) = tfshard_at(&s.endpoint, &["verify", &parts]);
    assert_eq!(code, 0, "{err}");
}

/// Puts the Hive test table in `s3://{b}/t`; returns its local folder.
fn hive_in_bucket(s: &Server, b: &str) -> PathBuf {
    let table = root().join("testdata/hive");
    client(&s.endpoint, &["put-dir", table.to_str().unwrap(), b, "t"]);
    table
}

/// Runs workers `order` of 3 over the Hive table in `s3://{b}/t` into `out` (600-byte
/// shards).
fn run_hive_workers(s: &Server, b: &str, out: &str, order: &[&str]) {
    for i in order {
        let args = [
            "convert",
            "parquet",
            &format!("s3://{b}/t"),
            "-o",
            out,
            "--target-shard-size",
            "600B",
            "--num-workers",
            "3",
            "--worker-index",
            i,
        ];
        let (code, _, err) = tfshard_at(&s.endpoint, &args);
        assert_eq!(code, 0, "worker {i}: {err}");
    }
}

#[test]
fn workers_meet_in_the_bucket_and_finalize_there() {
    let s = need_server!();
    let b = bucket(s, "workers");
    let table = hive_in_bucket(s, &b);
    let size = ["--target-shard-size", "600B"];
    let local = on_disk(s, &table, "s3-workers-local", &size);
    let out = format!("s3://{b}/w");
    run_hive_workers(s, &b, &out, &["2", "0", "1"]);
    // A finalize killed after its first copy, then rerun.
    let (code, err) =
        tfshard_with_failpoints(&s.endpoint, "publish:moved=exit", &["finalize", &out]);
    assert_eq!(code, 137, "{err}");
    let (code, stdout, err) = tfshard_at(&s.endpoint, &["finalize", &out, "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("\"workers\":3"), "{stdout}");
    let keys = client(&s.endpoint, &["ls", &b, "w/"]);
    assert!(
        !keys.contains("tfshard-parts") && !keys.contains("tfshard-tmp"),
        "{keys}"
    );
    let got = scratch("s3-workers-got");
    client(&s.endpoint, &["get-dir", &b, "w", got.to_str().unwrap()]);
    assert_eq!(
        crate::records_in_order(&got, "data"),
        crate::records_in_order(&local, "data")
    );
    let (code, _, err) = tfshard_at(&s.endpoint, &["verify", &out]);
    assert_eq!(code, 0, "{err}");
}

/// Converts `input` into the fresh scratch folder `name` with `flags`: the reference a
/// store run must equal.
fn on_disk(s: &Server, input: &Path, name: &str, flags: &[&str]) -> PathBuf {
    on_disk_as(s, "parquet", input, name, flags)
}

/// [`on_disk`] with `convert KIND` (`parquet`, `delta`).
fn on_disk_as(s: &Server, kind: &str, input: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let local = scratch(name);
    let args = [
        &[
            "convert",
            kind,
            input.to_str().unwrap(),
            "-o",
            local.to_str().unwrap(),
        ][..],
        flags,
    ]
    .concat();
    let (code, _, err) = tfshard_at(&s.endpoint, &args);
    assert_eq!(code, 0, "{err}");
    local
}

/// Checks that bucket `b` holds nothing under `out/` but the set published there (no
/// pending upload, no hidden object), with one machine's records (those in `local`), in order.
fn only_the_set(s: &Server, b: &str, local: &Path, scratch_name: &str, what: &str) {
    only_the_set_at(s, b, "out", local, scratch_name, what);
}

/// [`only_the_set`] under `prefix/`.
fn only_the_set_at(
    s: &Server,
    b: &str,
    prefix: &str,
    local: &Path,
    scratch_name: &str,
    what: &str,
) {
    assert_eq!(
        client(&s.endpoint, &["uploads", b]),
        "",
        "{what}: pending uploads"
    );
    let keys = client(&s.endpoint, &["ls", b, &format!("{prefix}/")]);
    assert!(!keys.is_empty(), "{what}: nothing under {prefix}/");
    assert!(
        keys.lines()
            .all(|k| k == format!("{prefix}/data.manifest.json")
                || (k.starts_with(&format!("{prefix}/data-")) && k.ends_with(".tfrecord"))),
        "{what}: {keys}"
    );
    let got = scratch(scratch_name);
    client(&s.endpoint, &["get-dir", b, prefix, got.to_str().unwrap()]);
    assert_eq!(
        crate::records_in_order(&got, "data"),
        crate::records_in_order(local, "data"),
        "{what}: records differ from one machine's"
    );
}

/// A worker killed at each point of an upload (between its creation and its
/// record, after its record, by a real SIGKILL mid-upload) and after it (every shard
/// written, every upload done, every copy made), then rerun, then `finalize`: the bucket
/// holds the published set and nothing else, no pending upload, and the set is one
/// machine's, byte for byte.
#[test]
fn a_killed_worker_rerun_then_finalize_leave_only_the_set() {
    let s = need_server!();
    let input = scratch("s3-killed-worker-in").join("blobs.parquet");
    // 40 rows of 512 KiB in 4 row groups: each worker's first shard is a multipart upload.
    blob_table_in_groups(&input, 40, 512 << 10, 10);
    let size = ["--target-shard-size", "9MiB"];
    let local = scratch("s3-killed-worker-local");
    let one = [
        &[
            "convert",
            "parquet",
            input.to_str().unwrap(),
            "-o",
            local.to_str().unwrap(),
        ][..],
        &size,
    ]
    .concat();
    let (code, _, err) = tfshard_at(&s.endpoint, &one);
    assert_eq!(code, 0, "{err}");
    let points = [
        "store:created",
        "store:uploading",
        "sigkill",
        "convert:written",
        "store:uploaded",
        "publish:placed",
    ];
    for (n, kill) in points.iter().enumerate() {
        let b = bucket(s, &format!("killed-worker-{n}"));
        let out = format!("s3://{b}/out");
        let worker = |i: &str| -> Vec<String> {
            [
                &["convert", "parquet", input.to_str().unwrap(), "-o", &out][..],
                &size,
                &["--num-workers", "2", "--worker-index", i],
            ]
            .concat()
            .iter()
            .map(|a| a.to_string())
            .collect()
        };
        let first = worker("0");
        let first: Vec<&str> = first.iter().map(String::as_str).collect();
        if *kill == "sigkill" {
            let gate = scratch("s3-killed-worker-gate").join("go");
            let mut child = tfshard_held(&s.endpoint, "store:uploading", &gate, &first);
            wait_for_failpoint(&mut child, &gate, "an upload started");
            child.kill().unwrap();
            assert_eq!(child.wait().unwrap().code(), None, "killed by a signal");
        } else {
            let (code, err) = tfshard_with_failpoints(&s.endpoint, &format!("{kill}=exit"), &first);
            assert_eq!(code, 137, "{kill}: {err}");
        }
        // Killed with an upload open (or, after writing, with its uploads perhaps still
        // streaming); objects only under the hidden prefix.
        let pending = client(&s.endpoint, &["uploads", &b]).lines().count();
        if n < 3 {
            // Its first shard's, and perhaps its last's (held back as the last, then
            // started under its final name at the commit, beside the first).
            assert!(
                (1..=2).contains(&pending),
                "{kill}: the killed attempt's uploads"
            );
        }
        assert!(
            client(&s.endpoint, &["ls", &b, ""])
                .lines()
                .all(|k| k.starts_with("out/.data.tfshard-parts/")),
            "{kill}: only hidden objects"
        );
        for i in ["0", "1"] {
            let args = worker(i);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, _, err) = tfshard_at(&s.endpoint, &args);
            assert_eq!(code, 0, "{kill}: worker {i}: {err}");
        }
        // A worker's rerun leaves the other attempt's upload alone; finalize aborts it.
        assert_eq!(
            client(&s.endpoint, &["uploads", &b]).lines().count(),
            pending,
            "{kill}"
        );
        let (code, _, err) = tfshard_at(&s.endpoint, &["finalize", &out]);
        assert_eq!(code, 0, "{kill}: {err}");
        only_the_set(s, &b, &local, &format!("s3-killed-worker-got-{n}"), kill);
        let (code, _, err) = tfshard_at(&s.endpoint, &["verify", &out]);
        assert_eq!(code, 0, "{kill}: {err}");
    }
}

/// Of two `finalize`s at once, one publishes; the other exits 1 naming the
/// claim, or, once the set is published, exits 0 saying so.
#[test]
fn two_finalizes_at_once_publish_once() {
    let s = need_server!();
    let b = bucket(s, "two-finalizes");
    hive_in_bucket(s, &b);
    let out = format!("s3://{b}/w");
    run_hive_workers(s, &b, &out, &["0", "1", "2"]);
    // The first holds its claim with the plan recorded; the second is refused.
    let gate = scratch("s3-two-finalizes-gate").join("go");
    let mut first = tfshard_held(&s.endpoint, "finalize:planned", &gate, &["finalize", &out]);
    wait_for_failpoint(&mut first, &gate, "the plan was recorded");
    let (code, _, err) = tfshard_at(&s.endpoint, &["finalize", &out]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("another finalize is publishing to this output") && err.lines().count() == 1,
        "{err}"
    );
    std::fs::write(&gate, "").unwrap();
    let done = first.wait_with_output().unwrap();
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    // Published: a later one says so, and changes nothing.
    let before = client(&s.endpoint, &["etags", &b, "w/"]);
    let (code, stdout, err) = tfshard_at(&s.endpoint, &["finalize", &out, "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["already_published"], true, "{summary}");
    assert_eq!(client(&s.endpoint, &["etags", &b, "w/"]), before);
    let (code, _, err) = tfshard_at(&s.endpoint, &["finalize", &out]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("already published by another finalize"),
        "{err}"
    );
}

/// A run killed with SIGKILL leaves its local staging folder; the next run
/// staging in the same place removes it (its lock is free), and never a live run's.
#[test]
fn a_killed_runs_staging_is_removed_by_the_next_run() {
    let s = need_server!();
    let b = bucket(s, "staging");
    let input = scratch("s3-staging-in").join("blobs.parquet");
    blob_table(&input, 24, 512 << 10);
    let tmp = scratch("s3-staging-tmp");
    let staged = || -> Vec<String> {
        std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".tfshard-staging-"))
            .collect()
    };
    let gate = scratch("s3-staging-gate").join("go");
    let out = format!("s3://{b}/a");
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(["convert", "parquet", input.to_str().unwrap(), "-o", &out])
        .envs(env(&s.endpoint))
        .env("TMPDIR", &tmp)
        .env(
            "TFSHARD_FAILPOINTS",
            format!("store:uploading=wait:{}", gate.display()),
        )
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_failpoint(&mut child, &gate, "an upload started");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(staged().len(), 1, "the killed run's staging is left");
    let out = format!("s3://{b}/b");
    let (code, _, err) = tfshard_env(
        &[
            env(&s.endpoint),
            vec![("TMPDIR", tmp.display().to_string())],
        ]
        .concat(),
        &["convert", "parquet", input.to_str().unwrap(), "-o", &out],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(staged(), Vec::<String>::new());
}

// ---- Engines: the Spark and Ray recipes, converting from and to the bucket ----

/// An engine's venv python: `TFSHARD_{SPARK,RAY}_VENV`, else `.venv-{spark,ray}`.
fn engine_python(engine: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(format!("TFSHARD_{}_VENV", engine.to_uppercase()))
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(format!(".venv-{engine}")));
    let python = dir.join("bin/python");
    if python.exists() {
        return Some(python);
    }
    if std::env::var_os("TFSHARD_REQUIRE_SERVERS").is_some() {
        panic!("TFSHARD_REQUIRE_SERVERS is set but .venv-{engine} is missing (scripts/engines_venv.sh)");
    }
    None
}

/// A stand-in for `tfshard` that kills the first run of worker 0 with SIGKILL once its
/// first multipart upload has started (a lost node, an OOM kill), and runs the rest as
/// they are.
fn killing_wrapper(dir: &Path) -> PathBuf {
    let script = dir.join("tfshard-killing-first");
    let body = format!(
        r#"#!/bin/sh
real='{real}'; dir='{dir}'
case " $* " in *" --worker-index 0 "*) ;; *) exec "$real" "$@" ;; esac
mkdir "$dir/first" 2>/dev/null || exec "$real" "$@"
TFSHARD_FAILPOINTS="store:uploading=wait:$dir/gate" "$real" "$@" &
pid=$!
while [ ! -e "$dir/gate.reached" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
kill -9 "$pid"
wait "$pid"
"#,
        real = assert_cmd::cargo::cargo_bin("tfshard").display(),
        dir = dir.display()
    );
    std::fs::write(&script, body).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// The engine's recipe with 3 workers, the first attempt of worker 0 killed
/// mid-upload: the engine retries it, `finalize` publishes one machine's set, and the
/// bucket holds that set and nothing else (no pending upload, no hidden object).
fn engine_recipe(engine: &str) {
    let s = need_server!();
    let Some(python) = engine_python(engine) else {
        eprintln!("skipped: no {engine} venv (run scripts/engines_venv.sh)");
        return;
    };
    let b = bucket(s, &format!("engine-{engine}"));
    let table = scratch(&format!("{engine}-table"));
    // 40 rows of 512 KiB in 4 row groups: worker 0's first shard is a multipart upload.
    blob_table_in_groups(&table.join("blobs.parquet"), 40, 512 << 10, 10);
    client(&s.endpoint, &["put-dir", table.to_str().unwrap(), &b, "t"]);
    let size = ["--target-shard-size", "9MiB"];
    let local = on_disk(s, &table, &format!("{engine}-local"), &size);
    let kills = scratch(&format!("{engine}-kills"));
    let recipe = root().join(format!("examples/engines/{engine}_convert.py"));
    let out = Command::new(python)
        .arg(recipe)
        .args([
            &format!("s3://{b}/t"),
            &format!("s3://{b}/out"),
            "--workers",
            "3",
            "--local",
            "--tfshard",
        ])
        .arg(killing_wrapper(&kills))
        .arg("--")
        .args(size)
        .envs(env(&s.endpoint))
        .env("TMPDIR", scratch_tmp())
        .env("SPARK_LOCAL_IP", "127.0.0.1")
        .env("RAY_USAGE_STATS_ENABLED", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{engine}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        kills.join("gate.reached").exists(),
        "{engine}: worker 0's first attempt never got to its upload"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("{}");
    let summary: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(summary["workers"], 3, "{summary}");
    only_the_set(s, &b, &local, &format!("{engine}-got"), engine);
}

#[test]
fn spark_recipe_retries_a_killed_worker_and_equals_one_machine() {
    engine_recipe("spark");
}

#[test]
fn ray_recipe_retries_a_killed_worker_and_equals_one_machine() {
    engine_recipe("ray");
}

/// The Airflow recipe (examples/engines/airflow_dag.py) run by `airflow dags test`:
/// three mapped worker tasks, then `finalize`, in the bucket; the set is one machine's.
#[test]
fn airflow_recipe_converts_then_finalizes_in_the_bucket() {
    let s = need_server!();
    let Some(python) = engine_python("airflow") else {
        eprintln!("skipped: no airflow venv (run scripts/engines_venv.sh)");
        return;
    };
    let airflow = python.with_file_name("airflow");
    let b = bucket(s, "engine-airflow");
    let table = hive_in_bucket(s, &b);
    let size = ["--target-shard-size", "600B"];
    let local = on_disk(s, &table, "airflow-local", &size);
    let home = scratch("airflow-home");
    let bin = assert_cmd::cargo::cargo_bin("tfshard");
    let settings = [
        ("AIRFLOW_HOME", home.display().to_string()),
        (
            "AIRFLOW__CORE__DAGS_FOLDER",
            root().join("examples/engines").display().to_string(),
        ),
        ("AIRFLOW__CORE__LOAD_EXAMPLES", "False".into()),
        ("TFSHARD_INPUT", format!("s3://{b}/t")),
        ("TFSHARD_OUTPUT", format!("s3://{b}/out")),
        ("TFSHARD_WORKERS", "3".into()),
        ("TFSHARD_FLAGS", size.join(" ")),
        ("TFSHARD_BIN", bin.display().to_string()),
    ];
    for args in [&["db", "migrate"][..], &["dags", "test", "tfshard_convert"]] {
        let out = Command::new(&airflow)
            .args(args)
            .envs(env(&s.endpoint))
            .envs(settings.iter().map(|(k, v)| (k, v)))
            .env("TMPDIR", scratch_tmp())
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "airflow {args:?}: {log}");
        if args[0] == "dags" {
            assert!(log.contains("state=success"), "the DAG run failed: {log}");
        }
    }
    only_the_set(s, &b, &local, "airflow-got", "airflow");
}

/// The Kubernetes recipe (examples/engines/k8s-indexed-job.yaml): its container's
/// command run as each of the Job's pods runs it (`$JOB_COMPLETION_INDEX` set), then
/// the `finalize` its comment gives, in the bucket the recipe names; the set is one
/// machine's.
#[test]
fn kubernetes_indexed_job_command_converts_then_finalizes() {
    let s = need_server!();
    let yaml =
        std::fs::read_to_string(root().join("examples/engines/k8s-indexed-job.yaml")).unwrap();
    let field = |name: &str| -> String {
        yaml.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in the recipe"))
            .trim()
            .to_string()
    };
    let completions: usize = field("completions").parse().unwrap();
    assert_eq!(field("completionMode"), "Indexed");
    let command: Vec<String> = serde_json::from_str(&field("command")).unwrap();
    assert_eq!(command[..2], ["sh", "-c"]);
    let b = bucket(s, "lake");
    let table = root().join("testdata/hive");
    client(
        &s.endpoint,
        &["put-dir", table.to_str().unwrap(), &b, "events"],
    );
    let local = on_disk(s, &table, "k8s-local", &[]);
    let bin = assert_cmd::cargo::cargo_bin("tfshard");
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for index in 0..completions {
        let out = Command::new("sh")
            .args(["-c", &command[2]])
            .envs(env(&s.endpoint))
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .env("PATH", &path)
            .env("TMPDIR", scratch_tmp())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pod {index}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let finalize = "tfshard finalize s3://lake/shards/";
    assert!(yaml.contains(finalize), "the recipe's finalize changed");
    let (code, _, err) = tfshard_at(&s.endpoint, &["finalize", "s3://lake/shards/"]);
    assert_eq!(code, 0, "{err}");
    only_the_set_at(s, &b, "shards", &local, "k8s-got", "kubernetes");
}

#[test]
fn resume_after_a_kill_on_s3() {
    let s = need_server!();
    let b = bucket(s, "resume");
    let input = scratch("s3-resume-in").join("blobs.parquet");
    blob_table(&input, 40, 256 << 10);
    let local = scratch("s3-resume-local");
    // (With statistics: a reused shard's partial is read back from the store.)
    let size = ["--target-shard-size", "2MiB", "--stats"];
    let (code, _, err) = tfshard_at(
        &s.endpoint,
        &[
            &[
                "convert",
                "parquet",
                input.to_str().unwrap(),
                "-o",
                local.to_str().unwrap(),
            ][..],
            &size,
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    let out = format!("s3://{b}/out");
    let args = [
        &[
            "convert",
            "parquet",
            input.to_str().unwrap(),
            "-o",
            &out,
            "--resume",
        ][..],
        &size,
    ]
    .concat();
    // Killed once the first shard is uploaded and journaled in the store.
    let (code, err) = tfshard_with_failpoints(&s.endpoint, "shard:journaled=exit", &args);
    assert_eq!(code, 137, "{err}");
    let keys = client(&s.endpoint, &["ls", &b, "out/"]);
    assert!(
        keys.contains("out/.data.tfshard-tmp/resume/journal.json"),
        "{keys}"
    );
    // A changed flag is named.
    let (code, _, err) = tfshard_at(
        &s.endpoint,
        &[&args[..], &["--max-records-per-shard", "3"]].concat(),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("max_records_per_shard"), "{err}");
    // The rerun finishes the job, byte for byte, and says what it reused: the shards
    // journaled (the first, and those uploaded before the journal was written).
    let (code, stdout, err) = tfshard_at(&s.endpoint, &[&args[..], &["--json"]].concat());
    assert_eq!(code, 0, "{err}");
    let got = scratch("s3-resume-got");
    client(&s.endpoint, &["get-dir", &b, "out", got.to_str().unwrap()]);
    assert_eq!(files(&got), files(&local));
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let reused = summary["reused"]["shards"].as_u64().unwrap() as usize;
    let bytes: usize = (files(&got).iter())
        .filter(|(n, _)| n.ends_with(".tfrecord"))
        .take(reused)
        .map(|(_, b)| b.len())
        .sum();
    assert!(reused >= 1, "{summary}");
    assert_eq!(summary["reused"]["bytes"], bytes, "{summary}");
    let keys = client(&s.endpoint, &["ls", &b, "out/"]);
    assert!(!keys.contains("tfshard-tmp"), "{keys}");
    assert_eq!(client(&s.endpoint, &["uploads", &b]), "");

    // Killed while a shard is being uploaded, and killed while copying into place.
    // (Shards above one 8 MiB part go up in a multipart upload.)
    for (phase, extra, target) in [
        ("store:uploading", &[][..], "9MiB"),
        ("publish:placed", &["--overwrite"][..], "2MiB"),
    ] {
        let size = ["--target-shard-size", target];
        let local = scratch(&format!("s3-resume-local-{}", phase.replace(':', "-")));
        let (code, _, err) = tfshard_at(
            &s.endpoint,
            &[
                &[
                    "convert",
                    "parquet",
                    input.to_str().unwrap(),
                    "-o",
                    local.to_str().unwrap(),
                ][..],
                &size,
            ]
            .concat(),
        );
        assert_eq!(code, 0, "{err}");
        let out = format!("s3://{b}/out-{}", phase.replace(':', "-"));
        let args = [
            &[
                "convert",
                "parquet",
                input.to_str().unwrap(),
                "-o",
                &out,
                "--resume",
            ][..],
            &size,
        ]
        .concat();
        let (code, err) = tfshard_with_failpoints(&s.endpoint, &format!("{phase}=exit"), &args);
        assert_eq!(code, 137, "{phase}: {err}");
        let (code, _, err) = tfshard_at(&s.endpoint, &[&args[..], extra].concat());
        assert_eq!(code, 0, "{phase}: {err}");
        let got = scratch(&format!("s3-resume-got-{}", phase.replace(':', "-")));
        client(
            &s.endpoint,
            &[
                "get-dir",
                &b,
                out.trim_start_matches(&format!("s3://{b}/")),
                got.to_str().unwrap(),
            ],
        );
        assert_eq!(files(&got), files(&local), "{phase}");
        assert_eq!(
            client(&s.endpoint, &["uploads", &b]),
            "",
            "{phase}: pending uploads"
        );
    }
}

#[test]
fn tfds_layout_written_to_s3_is_the_one_written_to_disk() {
    let s = need_server!();
    let b = bucket(s, "tfds");
    let table = root().join("testdata/hive");
    let common = [
        "--tfds",
        "hive_ds",
        "--split",
        "train=0.5,test=0.5",
        "--quiet",
    ];
    let local = scratch("s3-tfds-local");
    let url = format!("s3://{b}/out");
    for output in [local.to_str().unwrap(), &url] {
        let convert = ["convert", "parquet", table.to_str().unwrap(), "-o", output];
        let (code, _, err) = tfshard_at(&s.endpoint, &[&convert[..], &common].concat());
        assert_eq!(code, 0, "{output}: {err}");
    }
    let down = scratch("s3-tfds-down");
    client(
        &s.endpoint,
        &["get-dir", &b, "out/hive_ds/1.0.0", down.to_str().unwrap()],
    );
    let version = local.join("hive_ds/1.0.0");
    for name in ["dataset_info.json", "features.json"] {
        assert_eq!(
            std::fs::read(down.join(name)).unwrap(),
            std::fs::read(version.join(name)).unwrap(),
            "{name}"
        );
    }
    assert_eq!(files(&down), files(&version), "the same shards");
    let (code, out, err) = tfshard_at(&s.endpoint, &["verify", &format!("{url}/hive_ds/1.0.0")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("OK"), "{out}");
}

/// Store settings are values handed to each run, not a process-wide first
/// call or an environment variable read deep inside: two conversions in one process, at
/// once, with different `--io-concurrency`, `--io-timeout` and upload switches, both
/// publish, their shards are the same bytes, and each was uploaded as its own settings
/// say (streamed parts carry a CRC32C; buffered ones, object_store's, none).
#[test]
fn two_runs_in_one_process_keep_their_own_settings() {
    let s = need_server!();
    let b = bucket(s, "settings");
    // The library reads the store's environment: the runs happen in a child process of
    // this test binary that has it.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store::two_runs_in_one_process_child",
            "--ignored",
        ])
        .envs(env(&s.endpoint))
        .env("TFSHARD_TEST_BUCKET", &b)
        .env("TMPDIR", scratch_tmp())
        .output()
        .expect("run the child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (a, c) = (scratch("settings-a"), scratch("settings-b"));
    client(&s.endpoint, &["get-dir", &b, "a", a.to_str().unwrap()]);
    client(&s.endpoint, &["get-dir", &b, "b", c.to_str().unwrap()]);
    assert!(files(&a).len() > 2, "several shards");
    assert_eq!(files(&a), files(&c));
    // (A shard copied to its final name may lose its checksum on moto; the last one,
    // uploaded under its final name, keeps it.)
    let checksums = client(&s.endpoint, &["checksums", &b, ""]);
    let shards = |run: &str| {
        checksums
            .lines()
            .filter(|l| l.starts_with(run) && l.contains(".tfrecord"))
            .map(|l| !l.ends_with(" -"))
            .collect::<Vec<bool>>()
    };
    assert!(shards("a/").iter().all(|&c| !c), "buffered: {checksums}");
    assert!(shards("b/").iter().any(|&c| c), "streamed: {checksums}");
}

#[test]
#[ignore = "the child of two_runs_in_one_process_keep_their_own_settings"]
fn two_runs_in_one_process_child() {
    use tfshard::store::IoOptions;
    let bucket = std::env::var("TFSHARD_TEST_BUCKET").expect("run by its parent test");
    let run = |name: &str, io: IoOptions| {
        tfshard::Converter::parquet(vec![root().join("testdata/small.parquet")])
            .with_output(format!("s3://{bucket}/{name}"))
            .with_target_shard_bytes(100_000)
            .with_io(io)
            .build()
            .and_then(|c| c.run(&tfshard::NoProgress))
    };
    let one = IoOptions::new()
        .with_concurrency(1)
        .with_stream_parts(false)
        .with_read_ahead_bytes(1 << 20);
    let many = IoOptions::new()
        .with_concurrency(8)
        .with_timeout(Duration::from_secs(120));
    std::thread::scope(|scope| {
        let a = scope.spawn(|| run("a", one));
        let b = scope.spawn(|| run("b", many));
        let (a, b) = (a.join().unwrap().unwrap(), b.join().unwrap().unwrap());
        assert_eq!((a.records, b.records), (2000, 2000));
        assert_eq!(a.shards, b.shards);
    });
}

/// Runs `convert KIND TABLE` as two workers writing to `s3://{b}/out` with `flags`, then
/// `finalize` there; the finalized set, copied down into scratch folder `name`.
fn two_workers_then_finalize(
    s: &Server,
    kind: &str,
    table: &str,
    b: &str,
    flags: &[&str],
    name: &str,
) -> PathBuf {
    let out = format!("s3://{b}/out");
    for i in ["1", "0"] {
        let args = [
            &[
                "convert",
                kind,
                table,
                "-o",
                &out,
                "--num-workers",
                "2",
                "--worker-index",
                i,
            ][..],
            flags,
        ]
        .concat();
        let (code, _, err) = tfshard_at(&s.endpoint, &args);
        assert_eq!(code, 0, "worker {i}: {err}");
    }
    let (code, _, err) = tfshard_at(&s.endpoint, &["finalize", &out]);
    assert_eq!(code, 0, "{err}");
    let got = scratch(name);
    client(&s.endpoint, &["get-dir", b, "out", got.to_str().unwrap()]);
    got
}

/// An Iceberg table that pyiceberg wrote to the bucket (its SQL catalog's
/// warehouse on the S3 server: appends and a copy-on-write delete over identity and day
/// partitions): each snapshot converts to pyiceberg's rows, every file read through the
/// store with its ETag; workers reading it plus `finalize` there equal one machine.
#[test]
fn an_iceberg_table_in_the_bucket_converts_as_pyiceberg_reads_it() {
    let s = need_server!();
    let Some(python) = crate::iceberg::python() else {
        eprintln!("skipped: no pyiceberg venv (run scripts/iceberg_venv.sh)");
        return;
    };
    let b = bucket(s, "iceberg");
    let dir = scratch("s3-iceberg-tables");
    let expected = crate::iceberg::write_tables(&python, &dir, &["--s3", &s.endpoint, &b]);
    let table = expected["locations"]["s3_events"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(table.starts_with(&format!("s3://{b}/")), "{table}");
    let snapshots = expected["s3_events"].as_array().unwrap();
    for snapshot in snapshots {
        let out = scratch("s3-iceberg-out");
        let id = snapshot["snapshot_id"].as_i64().unwrap().to_string();
        let (code, _, err) = tfshard_at(
            &s.endpoint,
            &[
                "convert",
                "iceberg",
                &table,
                "-o",
                out.to_str().unwrap(),
                "--overwrite",
                "--snapshot-id",
                &id,
            ],
        );
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            crate::inspect_all(&out),
            snapshot["records"].as_array().unwrap().clone()
        );
        let manifest = crate::read_manifest(&out, "data");
        assert_eq!(manifest["table"]["location"], table.as_str());
        let inputs = manifest["inputs"].as_array().unwrap();
        assert!(inputs.iter().all(|i| i["etag"].is_string()), "{manifest}");
        assert_eq!(
            inputs.len(),
            1 + snapshot["files"].as_array().unwrap().len()
        );
    }

    let last = snapshots.last().unwrap()["snapshot_id"]
        .as_i64()
        .unwrap()
        .to_string();
    let flags = [
        "--snapshot-id",
        last.as_str(),
        "--target-shard-size",
        "8KiB",
    ];
    let one = scratch("s3-iceberg-one");
    let args = [
        &[
            "convert",
            "iceberg",
            &table,
            "-o",
            one.to_str().unwrap(),
            "--overwrite",
        ][..],
        &flags,
    ]
    .concat();
    let (code, _, err) = tfshard_at(&s.endpoint, &args);
    assert_eq!(code, 0, "{err}");
    let got = two_workers_then_finalize(s, "iceberg", &table, &b, &flags, "s3-iceberg-workers-got");
    assert_eq!(
        crate::records_in_order(&got, "data"),
        crate::records_in_order(&one, "data")
    );
}

/// A Delta table in the bucket (written by deltalake: partitions, a delete, a
/// checkpoint) converts to the bytes its copy on disk converts to, and workers reading
/// it from the bucket plus `finalize` there equal one machine's run.
#[test]
fn a_delta_table_in_the_bucket_converts_as_on_disk() {
    let s = need_server!();
    let Some((dir, _)) = crate::delta::tables() else {
        eprintln!("skipped: no deltalake venv (run scripts/delta_venv.sh)");
        return;
    };
    let b = bucket(s, "delta");
    client(
        &s.endpoint,
        &[
            "put-dir",
            dir.join("events").to_str().unwrap(),
            &b,
            "events",
        ],
    );
    let table = format!("s3://{b}/events");
    let flags = ["--target-shard-size", "8KiB", "--version", "4"];
    let local = on_disk_as(s, "delta", &dir.join("events"), "s3-delta-local", &flags);
    let from_s3 = scratch("s3-delta-from-s3");
    let args = [
        &["convert", "delta", &table, "-o", from_s3.to_str().unwrap()][..],
        &flags,
    ]
    .concat();
    let (code, _, err) = tfshard_at(&s.endpoint, &args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(files(&from_s3), files(&local));
    let manifest = crate::read_manifest(&from_s3, "data");
    assert_eq!(manifest["table"]["location"], table.as_str());
    assert!(manifest["inputs"][1]["etag"].is_string(), "{manifest}");

    let got = two_workers_then_finalize(s, "delta", &table, &b, &flags, "s3-delta-workers-got");
    assert_eq!(
        crate::records_in_order(&got, "data"),
        crate::records_in_order(&local, "data")
    );

    // `convert parquet` on the table in the bucket, or on a partition of it: refused.
    for input in [table.clone(), format!("{table}/day=2026-11-28")] {
        let (code, _, err) = tfshard_at(
            &s.endpoint,
            &[
                "convert",
                "parquet",
                &input,
                "-o",
                scratch("s3-delta-parquet").to_str().unwrap(),
            ],
        );
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("tfshard convert delta"), "{err}");
    }
}

/// TFRecords in the bucket (Spark's layout beside `_SUCCESS` and `.crc`
/// files, Beam's gzip files) convert as on disk, to disk and to the bucket, and workers
/// plus finalize in the bucket equal one machine's run.
#[test]
fn tfrecords_in_the_bucket_convert_as_on_disk() {
    let s = need_server!();
    let b = bucket(s, "tfrecords");
    let base = crate::root().join("testdata/tfrecord-in");
    for name in ["spark", "beam"] {
        client(
            &s.endpoint,
            &["put-dir", base.join(name).to_str().unwrap(), &b, name],
        );
    }
    let inputs = [format!("s3://{b}/spark"), format!("s3://{b}/beam")];
    let flags = ["--target-shard-size", "20KB"];
    let local = scratch("s3-tfin-local");
    let (spark, beam) = (base.join("spark"), base.join("beam"));
    let args = [
        &[
            "convert",
            "tfrecord",
            spark.to_str().unwrap(),
            beam.to_str().unwrap(),
            "-o",
            local.to_str().unwrap(),
        ][..],
        &flags,
    ]
    .concat();
    let (code, _, err) = tfshard_at(&s.endpoint, &args);
    assert_eq!(code, 0, "{err}");
    let from_s3 = scratch("s3-tfin-from-s3");
    let args = [
        &[
            "convert",
            "tfrecord",
            &inputs[0],
            &inputs[1],
            "-o",
            from_s3.to_str().unwrap(),
        ][..],
        &flags,
    ]
    .concat();
    let (code, _, err) = tfshard_at(&s.endpoint, &args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(files(&from_s3), files(&local));
    let manifest = crate::read_manifest(&from_s3, "data");
    assert_eq!(
        manifest["inputs"].as_array().unwrap().len(),
        6,
        "{manifest}"
    );
    assert!(manifest["inputs"][0]["etag"].is_string(), "{manifest}");

    // S3 to S3, one machine, then two workers and finalize.
    let out = format!("s3://{b}/out");
    let args = [
        &["convert", "tfrecord", &inputs[0], &inputs[1], "-o", &out][..],
        &flags,
    ]
    .concat();
    let (code, _, err) = tfshard_at(&s.endpoint, &args);
    assert_eq!(code, 0, "{err}");
    only_the_set(s, &b, &local, "s3-tfin-s3-out", "S3 to S3");
    let b2 = bucket(s, "tfrecords-workers");
    let out = format!("s3://{b2}/out");
    for i in ["1", "0"] {
        let args = [
            &["convert", "tfrecord", &inputs[0], &inputs[1], "-o", &out][..],
            &flags,
            &["--num-workers", "2", "--worker-index", i],
        ]
        .concat();
        let (code, _, err) = tfshard_at(&s.endpoint, &args);
        assert_eq!(code, 0, "worker {i}: {err}");
    }
    let (code, _, err) = tfshard_at(&s.endpoint, &["finalize", &out]);
    assert_eq!(code, 0, "{err}");
    only_the_set(s, &b2, &local, "s3-tfin-workers", "workers");
}

/// `--append` in a bucket, through the same code as on disk: a new partition, then a
/// replaced file (its ETag changed); after each, the set in the bucket holds a full
/// conversion's records, and no claim or temporary is left.
#[test]
fn appends_in_a_bucket_as_on_disk() {
    let s = need_server!();
    let b = bucket(s, "append");
    let table = scratch("s3-append-table");
    for day in 1..=3 {
        let part = table.join(format!("day={day}"));
        std::fs::create_dir_all(&part).unwrap();
        crate::convert::write_table(&part.join("part-0.parquet"), 300, day * 1000, 100);
    }
    let put = || {
        client(
            &s.endpoint,
            &["put-dir", table.to_str().unwrap(), &b, "table"],
        )
    };
    put();
    let src = format!("s3://{b}/table");
    let out = format!("s3://{b}/out");
    let shards = ["--max-records-per-shard", "250"];
    let convert = |extra: &[&str]| {
        let (code, stdout, err) = tfshard_at(
            &s.endpoint,
            &[
                &["convert", "parquet", &src, "-o", &out][..],
                &shards,
                extra,
            ]
            .concat(),
        );
        assert_eq!(code, 0, "{extra:?}: {err}");
        stdout
    };
    let fetch = |name: &str| {
        let d = scratch(&format!("s3-append-get-{name}"));
        client(&s.endpoint, &["get-dir", &b, "out", d.to_str().unwrap()]);
        d
    };
    let full = |name: &str| {
        let d = scratch(&format!("s3-append-full-{name}"));
        let (code, _, err) =
            crate::convert_parquet(&table, &d, &[&shards[..], &["--overwrite"]].concat());
        assert_eq!(code, 0, "{err}");
        d
    };
    convert(&[]);
    let before = crate::append::listed(&fetch("g0"));
    // A new partition.
    let part = table.join("day=4");
    std::fs::create_dir_all(&part).unwrap();
    crate::convert::write_table(&part.join("part-0.parquet"), 300, 4000, 100);
    put();
    let summary: serde_json::Value =
        serde_json::from_str(&convert(&["--append", "--json"])).unwrap();
    assert_eq!(
        (summary["generation"].as_u64(), summary["retired"].as_u64()),
        (Some(1), Some(0))
    );
    let got = fetch("g1");
    let now = crate::append::listed(&got);
    for (f, bytes) in &before {
        assert_eq!(now.get(f), Some(bytes), "{f} stays as it was");
    }
    assert_eq!(
        crate::append::payloads(&got),
        crate::append::payloads(&full("g1"))
    );
    // A replaced file: another ETag.
    crate::convert::write_table(&table.join("day=2/part-0.parquet"), 120, 9000, 100);
    put();
    let summary: serde_json::Value =
        serde_json::from_str(&convert(&["--append", "--json"])).unwrap();
    assert_eq!(summary["generation"], 2);
    assert_eq!(summary["retired"], 2, "{summary}");
    let got = fetch("g2");
    assert_eq!(
        crate::append::payloads(&got),
        crate::append::payloads(&full("g2"))
    );
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(got.join("data.manifest.json")).unwrap()).unwrap();
    let keys = client(&s.endpoint, &["ls", &b, "out"]);
    let mut expected: Vec<String> = (m["shards"].as_array().unwrap().iter())
        .map(|sh| format!("out/{}", sh["file"].as_str().unwrap()))
        .collect();
    expected.extend([
        "out/data.manifest.json".into(),
        "out/data.manifest-g00002.json".into(),
    ]);
    expected.sort();
    let mut listed: Vec<String> = keys.lines().map(str::to_owned).collect();
    listed.sort();
    assert_eq!(listed, expected, "the set and nothing else");
    // Nothing new.
    let summary: serde_json::Value =
        serde_json::from_str(&convert(&["--append", "--json"])).unwrap();
    assert_eq!(summary["up_to_date"], true);
    // Two workers and a finalize append one generation.
    let part = table.join("day=5");
    std::fs::create_dir_all(&part).unwrap();
    crate::convert::write_table(&part.join("part-0.parquet"), 300, 5000, 100);
    put();
    for i in ["0", "1"] {
        convert(&["--append", "--num-workers", "2", "--worker-index", i]);
    }
    let (code, stdout, err) = tfshard_at(&s.endpoint, &["finalize", &out, "--json"]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["generation"], 3, "{report}");
    let got = fetch("g3");
    assert_eq!(
        crate::append::payloads(&got),
        crate::append::payloads(&full("g3"))
    );
    let keys = client(&s.endpoint, &["ls", &b, "out"]);
    assert!(
        keys.lines().all(|k| !k.starts_with("out/.")),
        "no parts or claims left: {keys}"
    );
}

/// An append into a bucket killed at each step of its publish leaves a live set (the
/// old one, or past its manifest the new one); run again, it publishes the generation
/// an append never killed publishes, and nothing else is left in the bucket.
#[test]
fn a_killed_append_in_a_bucket_is_completed_by_a_rerun() {
    let s = need_server!();
    let b = bucket(s, "append-killed");
    let table = scratch("s3-append-killed-table");
    for day in 1..=2 {
        let part = table.join(format!("day={day}"));
        std::fs::create_dir_all(&part).unwrap();
        crate::convert::write_table(&part.join("part-0.parquet"), 300, day * 1000, 100);
    }
    client(
        &s.endpoint,
        &["put-dir", table.to_str().unwrap(), &b, "table"],
    );
    let src = format!("s3://{b}/table");
    let shards = ["--max-records-per-shard", "250"];
    let reference = scratch("s3-append-killed-ref");
    let (code, _, err) = crate::convert_parquet(&table, &reference, &shards);
    assert_eq!(code, 0, "{err}");
    let part = table.join("day=3");
    std::fs::create_dir_all(&part).unwrap();
    crate::convert::write_table(&part.join("part-0.parquet"), 300, 3000, 100);
    for (i, point) in [
        "store:uploaded",
        "publish:placed",
        "publish:pinned",
        "publish:published",
    ]
    .into_iter()
    .enumerate()
    {
        let out = format!("s3://{b}/out{i}");
        client(&s.endpoint, &["rm", &b, "table/day=3"]);
        let (code, _, err) = tfshard_at(
            &s.endpoint,
            &[&["convert", "parquet", &src, "-o", &out][..], &shards].concat(),
        );
        assert_eq!(code, 0, "{err}");
        client(
            &s.endpoint,
            &["put-dir", table.to_str().unwrap(), &b, "table"],
        );
        let args = [
            &["convert", "parquet", &src, "-o", &out, "--append"][..],
            &shards,
        ]
        .concat();
        let mut envs = env(&s.endpoint);
        envs.push(("TFSHARD_FAILPOINTS", format!("{point}=exit")));
        let (code, _, _) = tfshard_env(&envs, &args);
        assert_eq!(code, 137, "{point}");
        let (code, _, err) = tfshard_at(&s.endpoint, &args);
        assert_eq!(code, 0, "{point}: {err}");
        let got = scratch(&format!("s3-append-killed-get-{i}"));
        client(
            &s.endpoint,
            &["get-dir", &b, &format!("out{i}"), got.to_str().unwrap()],
        );
        let full = scratch("s3-append-killed-full");
        let (code, _, err) =
            crate::convert_parquet(&table, &full, &[&shards[..], &["--overwrite"]].concat());
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            crate::append::payloads(&got),
            crate::append::payloads(&full),
            "{point}"
        );
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(got.join("data.manifest.json")).unwrap())
                .unwrap();
        assert_eq!(
            m["generations"].as_array().unwrap().len(),
            2,
            "{point}: one generation"
        );
        let mut keys: Vec<String> = client(&s.endpoint, &["ls", &b, &format!("out{i}")])
            .lines()
            .map(|k| k.rsplit('/').next().unwrap().to_owned())
            .collect();
        keys.sort();
        let mut want: Vec<String> = (m["shards"].as_array().unwrap().iter())
            .map(|sh| sh["file"].as_str().unwrap().to_owned())
            .chain([
                "data.manifest.json".into(),
                "data.manifest-g00001.json".into(),
            ])
            .collect();
        want.sort();
        assert_eq!(keys, want, "{point}: the set and nothing else");
    }
}

/// `--append` into Azure Blob storage (Azurite), through the same code as S3 and disk:
/// a new partition becomes generation 1 and the set in the container holds a full
/// conversion's records. Azure gives a blob written again a new ETag: a file uploaded
/// again, even unchanged, counts as changed (its shards retired, its records converted
/// again), and the set still holds a full conversion's records. Then up to date.
#[test]
fn appends_in_azure_as_on_disk() {
    let Some(s) = azurite() else {
        eprintln!("skipped: no Azurite (run scripts/azurite.sh to install it)");
        return;
    };
    az_client(&s.endpoint, &["mb", "grow"]);
    let table = scratch("az-append-table");
    let add = |day: usize| {
        let part = table.join(format!("day={day}"));
        std::fs::create_dir_all(&part).unwrap();
        crate::convert::write_table(&part.join("part-0.parquet"), 300, day * 1000, 100);
    };
    let put = |day: usize| {
        let part = table.join(format!("day={day}"));
        let to = format!("t/day={day}");
        az_client(
            &s.endpoint,
            &["put-dir", part.to_str().unwrap(), "grow", &to],
        );
    };
    let shards = ["--max-records-per-shard", "250"];
    let convert = |extra: &[&str]| {
        let args = ["convert", "parquet", "az://grow/t", "-o", "az://grow/out"];
        let (code, stdout, err) = tfshard_az(&s.endpoint, &[&args[..], &shards, extra].concat());
        assert_eq!(code, 0, "{extra:?}: {err}");
        stdout
    };
    let same_as_full = |what: &str| {
        let got = scratch("az-append-got");
        az_client(
            &s.endpoint,
            &["get-dir", "grow", "out", got.to_str().unwrap()],
        );
        let full = scratch("az-append-full");
        let flags = [&shards[..], &["--overwrite"]].concat();
        let (code, _, err) = crate::convert_parquet(&table, &full, &flags);
        assert_eq!(code, 0, "{err}");
        let (a, b) = (
            crate::append::payloads(&got),
            crate::append::payloads(&full),
        );
        assert_eq!(a, b, "{what}");
    };
    for day in 1..=2 {
        add(day);
        put(day);
    }
    convert(&[]);
    add(3);
    put(3);
    let summary: serde_json::Value =
        serde_json::from_str(&convert(&["--append", "--json"])).unwrap();
    let done = (summary["generation"].as_u64(), summary["retired"].as_u64());
    assert_eq!(done, (Some(1), Some(0)), "{summary}");
    same_as_full("a new partition");
    put(1);
    let summary: serde_json::Value =
        serde_json::from_str(&convert(&["--append", "--json"])).unwrap();
    assert_eq!(summary["generation"], 2);
    assert!(summary["retired"].as_u64().unwrap() > 0, "{summary}");
    same_as_full("a file uploaded again");
    let summary: serde_json::Value =
        serde_json::from_str(&convert(&["--append", "--json"])).unwrap();
    assert_eq!(summary["up_to_date"], true);
}
