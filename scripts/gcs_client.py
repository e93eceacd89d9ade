#!/usr/bin/env python3
"""A plain GCS client for the object-store tests, over the JSON API of the server at
STORAGE_EMULATOR_HOST (fake-gcs-server on 127.0.0.1), with the standard library only.

    gcs_client.py mb BUCKET
    gcs_client.py put-dir LOCAL_DIR BUCKET PREFIX      # uploads every file below LOCAL_DIR
    gcs_client.py rm BUCKET KEY
"""
import json
import os
import sys
import urllib.parse
import urllib.request
from pathlib import Path


def call(method, path, body=b"", query=None):
    url = os.environ["STORAGE_EMULATOR_HOST"].rstrip("/") + path
    if query:
        url += "?" + urllib.parse.urlencode(query)
    request = urllib.request.Request(url, data=body if method != "GET" else None, method=method)
    with urllib.request.urlopen(request) as answer:
        return answer.read()


def main(argv):
    cmd = argv[0]
    if cmd == "mb":
        call("POST", "/storage/v1/b", json.dumps({"name": argv[1]}).encode())
    elif cmd == "put-dir":
        local, bucket, prefix = Path(argv[1]), argv[2], argv[3].strip("/")
        for f in sorted(local.rglob("*")):
            if f.is_file():
                rel = f.relative_to(local).as_posix()
                key = f"{prefix}/{rel}" if prefix else rel
                call("POST", f"/upload/storage/v1/b/{bucket}/o", f.read_bytes(),
                     {"uploadType": "media", "name": key})
    elif cmd == "rm":
        call("DELETE", f"/storage/v1/b/{argv[1]}/o/{urllib.parse.quote(argv[2], safe='')}")
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv[1:])
