#!/usr/bin/env python3
"""A plain S3 client for the object-store tests (boto3), against AWS_ENDPOINT_URL.

    s3_client.py mb BUCKET
    s3_client.py put-dir LOCAL_DIR BUCKET PREFIX      # uploads every file below LOCAL_DIR
    s3_client.py get-dir BUCKET PREFIX LOCAL_DIR      # downloads every object below PREFIX
    s3_client.py ls BUCKET [PREFIX]                   # one key per line
    s3_client.py etags BUCKET PREFIX                  # "KEY ETAG" per object (a multipart one's ends in -PARTS)
    s3_client.py checksums BUCKET PREFIX              # "KEY CRC32C" per object ("-" when it has none)
    s3_client.py uploads BUCKET                       # pending multipart uploads, one key per line
    s3_client.py flip BUCKET KEY OFFSET               # rewrites the object with one byte flipped
    s3_client.py create-key                           # an IAM user and key; prints "ID SECRET"
"""
import os
import sys
from pathlib import Path

import boto3


def client(service="s3"):
    return boto3.client(
        service,
        endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
    )


def main(argv):
    s3 = client()
    cmd = argv[0]
    if cmd == "mb":
        s3.create_bucket(Bucket=argv[1])
    elif cmd == "put-dir":
        local, bucket, prefix = Path(argv[1]), argv[2], argv[3].strip("/")
        for f in sorted(local.rglob("*")):
            if f.is_file():
                key = f"{prefix}/{f.relative_to(local).as_posix()}" if prefix else f.relative_to(local).as_posix()
                s3.upload_file(str(f), bucket, key)
    elif cmd == "get-dir":
        bucket, prefix, local = argv[1], argv[2].strip("/"), Path(argv[3])
        for key in keys(s3, bucket, prefix):
            rel = key[len(prefix) + 1 :] if prefix else key
            dest = local / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(dest))
    elif cmd == "ls":
        for key in keys(s3, argv[1], argv[2] if len(argv) > 2 else ""):
            print(key)
    elif cmd == "rm":
        for key in list(keys(s3, argv[1], argv[2])):
            s3.delete_object(Bucket=argv[1], Key=key)
    elif cmd == "etags":
        for key in keys(s3, argv[1], argv[2]):
            print(key, s3.head_object(Bucket=argv[1], Key=key)["ETag"].strip('"'))
    elif cmd == "checksums":
        for key in keys(s3, argv[1], argv[2]):
            head = s3.head_object(Bucket=argv[1], Key=key, ChecksumMode="ENABLED")
            print(key, head.get("ChecksumCRC32C", "-"))
    elif cmd == "uploads":
        r = s3.list_multipart_uploads(Bucket=argv[1])
        for u in r.get("Uploads", []):
            print(u["Key"])
    elif cmd == "flip":
        bucket, key, offset = argv[1], argv[2], int(argv[3])
        body = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        body[offset] ^= 0x01
        s3.put_object(Bucket=bucket, Key=key, Body=bytes(body))
    elif cmd == "create-key":
        iam = client("iam")
        iam.create_user(UserName="tfshard-test")
        key = iam.create_access_key(UserName="tfshard-test")["AccessKey"]
        print(key["AccessKeyId"], key["SecretAccessKey"])
    else:
        sys.exit(f"unknown command {cmd}")


def keys(s3, bucket, prefix):
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            yield o["Key"]


if __name__ == "__main__":
    main(sys.argv[1:])
