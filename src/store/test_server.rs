//! moto's S3 server on 127.0.0.1 for the library's own tests (the conformance suite of
//! the destinations), started once per test process from the venv that
//! `scripts/s3_venv.sh` makes. Without it the tests say they were skipped; with
//! `TFSHARD_REQUIRE_SERVERS` set (`.ci/run`) a missing server fails them.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The running server.
pub(crate) struct S3 {
    endpoint: String,
    venv: PathBuf,
    _child: Child,
}

impl S3 {
    /// Makes a fresh bucket, named `name` plus this process's id.
    pub(crate) fn bucket(&self, name: &str) -> String {
        let bucket = format!("{name}-{}", std::process::id());
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = Command::new(self.venv.join("bin/python"))
            .arg(root.join("scripts/s3_client.py"))
            .args(["mb", &bucket])
            .env("AWS_ENDPOINT_URL", &self.endpoint)
            .status()
            .expect("run s3_client.py");
        assert!(status.success(), "make bucket {bucket}");
        bucket
    }
}

/// The server, started on first use; `None` (the test prints that it was skipped)
/// when moto is not installed.
pub(crate) fn s3() -> Option<&'static S3> {
    static SERVER: OnceLock<Option<S3>> = OnceLock::new();
    let server = SERVER
        .get_or_init(|| {
            let venv = std::env::var_os("TFSHARD_S3_VENV")
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-s3"));
            if !venv.join("bin/moto_server").exists() {
                assert!(
                    std::env::var_os("TFSHARD_REQUIRE_SERVERS").is_none(),
                    "TFSHARD_REQUIRE_SERVERS is set but moto_server is missing (scripts/s3_venv.sh)"
                );
                return None;
            }
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            // Under `sh`, which kills the server when its stdin (held by this process)
            // closes: the server ends with the test process.
            let child = Command::new("sh")
                .arg("-c")
                .arg(r#""$0" "$@" & server=$!; cat > /dev/null; kill "$server" 2>/dev/null; wait "$server""#)
                .arg(venv.join("bin/moto_server"))
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start moto_server");
            // A start-up guard, not a timing assertion.
            let deadline = Instant::now() + Duration::from_secs(60);
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "moto_server did not start");
                std::thread::sleep(Duration::from_millis(100));
            }
            let endpoint = format!("http://127.0.0.1:{port}");
            // object_store reads these when a bucket's client is made; no other test
            // of this process talks to a store.
            for (key, value) in [
                ("AWS_ACCESS_KEY_ID", "testing"),
                ("AWS_SECRET_ACCESS_KEY", "testing-secret-key"),
                ("AWS_REGION", "us-east-1"),
                ("AWS_ALLOW_HTTP", "true"),
                ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ] {
                std::env::set_var(key, value);
            }
            Some(S3 {
                endpoint,
                venv,
                _child: child,
            })
        })
        .as_ref();
    if server.is_none() {
        eprintln!("skipped: no S3 server (run scripts/s3_venv.sh to install moto)");
    }
    server
}
