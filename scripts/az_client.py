#!/usr/bin/env python3
"""A plain Azure Blob client for the object-store tests (azure-storage-blob), against the
Azurite emulator at AZURITE_BLOB_STORAGE_URL with its well-known account.

    az_client.py mb CONTAINER
    az_client.py put-dir LOCAL_DIR CONTAINER PREFIX
    az_client.py get-dir CONTAINER PREFIX LOCAL_DIR
    az_client.py ls CONTAINER [PREFIX]
    az_client.py copy-status CONTAINER PREFIX     # "NAME STATUS" per blob (STATUS "none" if not copied)
"""
import os
import sys
from pathlib import Path

from azure.storage.blob import BlobServiceClient

KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def service():
    url = os.environ["AZURITE_BLOB_STORAGE_URL"].rstrip("/")
    conn = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={KEY};BlobEndpoint={url}/devstoreaccount1;"
    )
    return BlobServiceClient.from_connection_string(conn)


def main(argv):
    svc = service()
    cmd = argv[0]
    if cmd == "mb":
        svc.create_container(argv[1])
    elif cmd == "put-dir":
        local, container, prefix = Path(argv[1]), argv[2], argv[3].strip("/")
        c = svc.get_container_client(container)
        for f in sorted(local.rglob("*")):
            if f.is_file():
                rel = f.relative_to(local).as_posix()
                with open(f, "rb") as data:
                    c.upload_blob(f"{prefix}/{rel}" if prefix else rel, data, overwrite=True)
    elif cmd == "get-dir":
        container, prefix, local = argv[1], argv[2].strip("/"), Path(argv[3])
        c = svc.get_container_client(container)
        for b in c.list_blobs(name_starts_with=prefix):
            rel = b.name[len(prefix) + 1 :] if prefix else b.name
            dest = local / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(c.download_blob(b.name).readall())
    elif cmd == "ls":
        c = svc.get_container_client(argv[1])
        for b in c.list_blobs(name_starts_with=argv[2] if len(argv) > 2 else None):
            print(b.name)
    elif cmd == "copy-status":
        c = svc.get_container_client(argv[1])
        for b in c.list_blobs(name_starts_with=argv[2]):
            props = c.get_blob_client(b.name).get_blob_properties()
            print(b.name, props.copy.status or "none")
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv[1:])
