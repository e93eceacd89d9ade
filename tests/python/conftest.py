"""Fixtures of the Python module's tests (run by .ci/run in scripts/python_venv.sh's venv,
against the installed wheel).

Servers and other venvs the tests need (moto's S3 server from .venv-s3, TensorFlow from
.venv) are used when present; a test that cannot run says so when it skips, and with
TFSHARD_REQUIRE_SERVERS set (.ci/run) it fails instead.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = ROOT / "testdata"
SMALL = TESTDATA / "small.parquet"


def missing(what: str) -> None:
    """Skips, saying why; fails under .ci/run."""
    if os.environ.get("TFSHARD_REQUIRE_SERVERS"):
        pytest.fail(f"{what} (required: TFSHARD_REQUIRE_SERVERS is set)")
    pytest.skip(what)


@pytest.fixture(scope="session")
def tfshard_bin() -> str:
    """The `tfshard` command the wheel put beside this venv's python."""
    path = Path(sys.executable).parent / "tfshard"
    assert path.exists(), f"the wheel did not install the tfshard command at {path}"
    return str(path)


def cli(tfshard_bin: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([tfshard_bin, *args], capture_output=True, text=True)


@pytest.fixture(scope="session")
def small_shards(tmp_path_factory, tfshard_bin) -> Path:
    """testdata/small.parquet converted by the command line into 4 shards."""
    out = tmp_path_factory.mktemp("small") / "out"
    done = cli(tfshard_bin, "convert", "parquet", str(SMALL), "-o", str(out), "--target-shard-size", "100KB", "--quiet")
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def tf_python() -> str:
    """TensorFlow's venv (scripts/venv.sh, tf_interop's)."""
    python = ROOT / ".venv" / "bin" / "python"
    if not python.exists():
        missing("no TensorFlow venv (.venv: scripts/venv.sh)")
    return str(python)


@contextlib.contextmanager
def moto_server(log=None):
    """moto's S3 server on 127.0.0.1 (from .venv-s3), its request log in the file `log`
    if given, with the AWS_* variables pointing tfshard at it; yields a function that
    makes a bucket."""
    server = ROOT / ".venv-s3" / "bin" / "moto_server"
    if not server.exists():
        missing("no moto server (.venv-s3: scripts/s3_venv.sh)")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    err = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=err)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP")}
    os.environ.update(
        AWS_ACCESS_KEY_ID="moto", AWS_SECRET_ACCESS_KEY="moto", AWS_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint, AWS_ALLOW_HTTP="true"
    )

    def bucket(name: str) -> str:
        # moto makes a bucket on a plain PUT.
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{name}", method="PUT")).read()
        return name

    try:
        yield bucket
    finally:
        proc.terminate()
        proc.wait()
        if log:
            err.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def s3():
    """moto's S3 server (see moto_server), for the session."""
    with moto_server() as bucket:
        yield bucket


def shard_bytes(folder: Path) -> dict:
    """The shards of a folder by name, their bytes (manifests differ in times and inputs)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name.endswith(".tfrecord")}


def corrupt_copy(src: Path, dst: Path, shard: int, at=lambda n: n // 2) -> Path:
    """A copy of a shard folder with one byte of its `shard`-th shard flipped (at
    `at(length)`); returns that shard's path."""
    shutil.copytree(src, dst)
    path = sorted(dst.glob("*.tfrecord"))[shard]
    data = bytearray(path.read_bytes())
    data[at(len(data))] ^= 0x55
    path.write_bytes(bytes(data))
    return path
