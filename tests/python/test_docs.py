"""The manual's Python examples and the manifest's JSON Schema.

- Each ```python test``` block of README.md and docs/*.md runs, in order per file, in one
  folder with testdata/ linked into it (as tests/cli/docs.rs runs the shell blocks).
- docs/manifest.schema.json is a valid JSON Schema, and every manifest the tests wrote
  validates against it: those of `cargo test` (left under target/test-scratch/, which
  .ci/run runs first), of the manual's examples, and of the Python tests here.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, cli

MANUAL = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCHEMA = json.loads((ROOT / "docs" / "manifest.schema.json").read_text())
# Manifests a test wrote by hand to be refused (a shard path that leaves the folder).
BROKEN_ON_PURPOSE = {"verify_manifest_counts"}


def python_blocks(path: Path) -> list[tuple[int, str]]:
    blocks, body, start = [], None, 0
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            if body is None:
                body, start = ([] if line.strip() == "```python test" else None), n
                if body is None:
                    body = False  # another kind of block: skip to its end
            else:
                if body is not False:
                    blocks.append((start, "\n".join(body)))
                body = None
        elif body not in (None, False):
            body.append(line)
    return blocks


def test_manual_python_examples_run(tmp_path, tfshard_bin):
    ran = 0
    for path in MANUAL:
        blocks = python_blocks(path)
        if not blocks:
            continue
        folder = tmp_path / path.stem
        folder.mkdir()
        (folder / "testdata").symlink_to(ROOT / "testdata")
        env = dict(os.environ, PATH=f"{Path(tfshard_bin).parent}:{os.environ['PATH']}")
        for line, code in blocks:
            done = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{path.relative_to(ROOT)}:{line}\n{done.stdout}{done.stderr}"
            ran += 1
        for manifest in folder.rglob("*.manifest.json"):
            validate(manifest)
    assert ran >= 5, f"only {ran} python test blocks found"


def validate(path: Path) -> None:
    errors = list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(json.loads(path.read_text())))
    assert not errors, f"{path}: {errors[0].json_path}: {errors[0].message}"


def test_schema_is_a_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_every_manifest_cargo_test_wrote_validates():
    scratch = ROOT / "target" / "test-scratch"
    manifests = [
        p
        for p in scratch.glob("**/*.manifest.json")
        if p.relative_to(scratch).parts[0] not in BROKEN_ON_PURPOSE
    ]
    # (glob skips hidden folders: the workers' part manifests are in .PREFIX.tfshard-parts/.)
    manifests += [p for p in scratch.glob("*/.*/*/*.manifest.json")]
    if not manifests:
        if os.environ.get("CI"):
            pytest.fail("no manifests under target/test-scratch: .ci/run runs cargo test first")
        pytest.skip("no manifests under target/test-scratch (run cargo test first)")
    for path in manifests:
        validate(path)
    print(f"{len(manifests)} manifests validated")


@pytest.mark.parametrize(
    "args",
    [
        ["convert", "parquet", "testdata/small.parquet", "--split", "train=0.8,test=0.2", "--shuffle", "--compression", "gzip"],
        ["convert", "images", "testdata/images", "--on-error", "skip"],
        ["convert", "delta", "testdata/delta-kernel/table-with-dv-small"],
        ["convert", "iceberg", "testdata/iceberg-table"],
        ["convert", "tfrecord", "testdata/tfrecord-in/spark", "--record-type", "bytes"],
        ["convert", "parquet", "testdata/hive", "--tfds", "hive_ds"],
    ],
    ids=["parquet-split", "images", "delta", "iceberg", "tfrecord-bytes", "tfds"],
)
def test_manifests_of_each_source_validate(tmp_path, tfshard_bin, args):
    args = [str(ROOT / a) if a.startswith("testdata/") else a for a in args]
    done = cli(tfshard_bin, *args, "-o", str(tmp_path / "out"), "--quiet")
    assert done.returncode == 0, done.stderr
    manifests = list((tmp_path / "out").rglob("*.manifest.json"))
    assert manifests
    for path in manifests:
        validate(path)


def test_a_bad_manifest_is_refused_by_the_schema():
    manifest = {
        "manifest_version": 1, "tfshard_version": "0.1.0", "created": "2026-12-03T00:00:00Z",
        "record_type": "example", "compression": "none",
        "options": {"compression": "none", "prefix": "data", "record_type": "example", "target_shard_size": 1},
        "inputs": [], "features": [], "shards": [], "records": 0, "bytes": 0,
    }
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert not list(validator.iter_errors(manifest))
    for bad in [
        {**manifest, "records": -1},
        {**manifest, "compression": "brotli"},
        {**manifest, "shards": [{"file": "../x.tfrecord", "records": 1, "bytes": 1, "crc32c": "00000000"}]},
        {**manifest, "shards": [{"file": "x.tfrecord", "records": 1, "bytes": 1, "crc32c": "XYZ"}]},
        {**manifest, "renamed_key": 1},
        {k: v for k, v in manifest.items() if k != "features"},
    ]:
        assert list(validator.iter_errors(bad)), bad
