"""The tuned client that scripts/bench_s3.sh compares `convert` S3 -> S3 with:
boto3, the client most data-platform jobs already run, with 4 threads and 8 MiB parts,
moving the same bytes through the same server and doing nothing else.

    boto3_plain.py SRC_BUCKET SRC_PREFIX SHARDS_DIR DST_BUCKET DST_PREFIX

GETs every object below s3://SRC_BUCKET/SRC_PREFIX (the Parquet inputs), then PUTs every
file of the local folder SHARDS_DIR (the shards tfshard writes from them) below
s3://DST_BUCKET/DST_PREFIX. The endpoint and credentials come from the AWS_* variables
(scripts/moto.sh). Prints one JSON line: {"get_seconds", "put_seconds", "seconds",
"bytes"}.
"""

import json
import os
import sys
import time

import boto3
from boto3.s3.transfer import TransferConfig

MIB = 1 << 20
CONFIG = TransferConfig(
    multipart_threshold=8 * MIB,
    multipart_chunksize=8 * MIB,
    max_concurrency=4,
    use_threads=True,
)


class Sink:
    """A file object that keeps nothing (the GETs' bytes are not the work measured)."""

    def __init__(self):
        self.bytes = 0

    def write(self, data):
        self.bytes += len(data)
        return len(data)


def main(argv):
    src_bucket, src_prefix, shards, dst_bucket, dst_prefix = argv
    s3 = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL"))
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=src_bucket, Prefix=src_prefix.strip("/") + "/"
    ):
        keys += [o["Key"] for o in page.get("Contents", [])]
    moved = 0
    t0 = time.perf_counter()
    for key in sorted(keys):
        sink = Sink()
        s3.download_fileobj(src_bucket, key, sink, Config=CONFIG)
        moved += sink.bytes
    t1 = time.perf_counter()
    for name in sorted(os.listdir(shards)):
        path = os.path.join(shards, name)
        if name.startswith(".") or not os.path.isfile(path):
            continue
        s3.upload_file(path, dst_bucket, f"{dst_prefix.strip('/')}/{name}", Config=CONFIG)
        moved += os.path.getsize(path)
    t2 = time.perf_counter()
    print(json.dumps({"get_seconds": t1 - t0, "put_seconds": t2 - t1, "seconds": t2 - t0, "bytes": moved}))


if __name__ == "__main__":
    main(sys.argv[1:])
