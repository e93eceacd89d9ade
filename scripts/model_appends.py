#!/usr/bin/env python3
"""Random histories of `tfshard convert ... --append` against a model: the promise that
after any sequence of appends the live shards hold exactly one snapshot of the table.

    python scripts/model_appends.py --tfshard target/debug/tfshard --histories 200
    python scripts/model_appends.py --tfshard BIN --replay SEED      # one history, told step by step

Each history picks a source (a Parquet folder, a Hive-partitioned folder, TFRecord files,
a Delta table written by deltalake, an Iceberg table written by pyiceberg), options that
stay with the set (splits by key, a shuffle, --index or gzip, --retain), converts it,
then changes it and appends, several times. Changes: files added, replaced (same size,
in place with the old mtime set back, another size, an older mtime, within the same
second), deleted, rewritten; rows deleted (Delta deletion vectors and Iceberg position
delete files written by hand, copy-on-write deletes by deltalake and pyiceberg); a
schema change; an overwrite. Each append runs plainly, with --resume, as workers and
`finalize`, killed at a failpoint and run again, or as two at once; some steps compact
the set, some convert it again with --overwrite, each with another shard size.

After every step, against the model:
- `verify --deep` passes, and so does every pinned manifest the set keeps;
- the live records equal a full conversion of the same snapshot (a multiset of
  payloads, per split), and their ids are the snapshot's as the model knows them (read
  from the files and the deletes it wrote, not through tfshard);
- the shards the step did not retire are byte for byte as they were;
- the shards it retired are those holding records of an input that changed (exactly, for
  sources whose records are known before reading, without splits or a shuffle; at least,
  and each for a reason, otherwise);
- a step that changed nothing is up to date and writes nothing;
- with `--stats`, the statistics the set keeps equal those `tfshard stats` computes from
  its live shard files.

A failure prints its seed and the command that replays it. Needs deltalake, pyiceberg,
pyarrow and pyroaring (scripts/model_venv.sh); exits 1 on any violation.
"""
import argparse
import gzip
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import struct
import subprocess
import sys
import time
import traceback
import uuid
import zlib
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

KINDS = ["parquet", "hive", "tfrecord", "delta", "iceberg"]
FAILPOINTS = ["convert:planned", "convert:written", "shard:journaled", "publish:placed",
              "publish:pinned", "publish:manifest", "publish:published", "publish:moved"]


class Violation(Exception):
    pass


from tfrecord_bytes import example, frame, id_of  # noqa: E402
from tfrecord_bytes import payloads as stream_payloads  # noqa: E402


def payloads(path):
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    return stream_payloads(data)


# --- The sources -----------------------------------------------------------------------

def rows_table(ids, extra=False):
    cols = {
        "id": pa.array(ids, pa.int64()),
        "v": pa.array([i * 0.5 for i in ids], pa.float64()),
        "name": pa.array([None if i % 7 == 3 else f"r{i}" for i in ids], pa.string()),
    }
    if extra:
        cols["extra"] = pa.array([i % 5 for i in ids], pa.int32())
    return pa.table(cols)


class Source:
    """A table that changes; what a full conversion of it now holds."""

    exact = True  # records known before reading (else an append reads a touched input whole)

    def __init__(self, h):
        self.h = h
        self.rng = h.rng
        self.root = h.dir / "table"
        self.root.mkdir(parents=True)

    def next_ids(self, n):
        first = self.h.next_id
        self.h.next_id += n
        return list(range(first, first + n))

    def n_rows(self):
        return self.rng.choice([0, 1, 2, 3, 7, 13, 31, 64, 97])


class FileSource(Source):
    """Files in a folder (Parquet or TFRecord), named by their path below it."""

    suffix = ".parquet"

    def __init__(self, h):
        super().__init__(h)
        self.files = {}   # rel -> ids
        self.extra = False
        self.seq = 0

    def new_name(self):
        self.seq += 1
        return f"part-{self.rng.randint(0, 9999):04d}-{self.seq:03d}{self.suffix}"

    def write(self, rel, ids, in_place=False):
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if in_place and path.exists():
            with open(path, "r+b") as f:
                f.truncate(0)
                f.write(self.encode(ids))
        else:
            tmp = path.with_name(f".tmp-{path.name}")
            tmp.write_bytes(self.encode(ids))
            os.replace(tmp, path)
        self.files[rel] = list(ids)

    def encode(self, ids):
        sink = pa.BufferOutputStream()
        pq.write_table(rows_table(ids, self.extra), sink, compression="none")
        return sink.getvalue().to_pybytes()

    def init(self):
        for _ in range(self.rng.randint(1, 4)):
            self.write(self.new_name(), self.next_ids(self.n_rows()))

    def ids(self):
        return [i for ids in self.files.values() for i in ids]

    def mutate(self):
        """One change; returns the inputs (relative paths) it changed or removed."""
        op = self.rng.choice(["add", "add", "same-size", "in-place", "size", "older", "delete",
                              "rewrite", "nothing"] + (["schema"] if self.suffix == ".parquet" else []))
        files = sorted(self.files)
        if op == "add" or not files:
            rel = self.new_name()
            self.write(rel, self.next_ids(self.n_rows()))
            return "add", set()
        rel = self.rng.choice(files)
        path = self.root / rel
        if op == "same-size":
            # Other rows, as many (same size); the mtime set back to the old one.
            st = path.stat()
            self.write(rel, self.next_ids(len(self.files[rel])))
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        elif op == "in-place":
            # Rewritten in place (same inode), its old mtime set back: only ctime tells.
            st = path.stat()
            self.write(rel, self.next_ids(len(self.files[rel])), in_place=True)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        elif op == "size":
            self.write(rel, self.next_ids(self.n_rows() + 1))
        elif op == "older":
            self.write(rel, self.next_ids(len(self.files[rel])))
            os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
        elif op == "delete" and len(files) > 1:
            # (A folder with no file left is no input: the last one stays.)
            path.unlink()
            del self.files[rel]
        elif op == "rewrite":
            ids = self.files.pop(rel)
            path.unlink()
            self.write(self.new_name(), ids[: self.rng.randint(0, len(ids))])
        elif op == "schema":
            self.extra = not self.extra
            for r in files:
                self.write(r, self.files[r])
            return "schema", set(files)
        else:
            return "nothing", set()
        return op, {rel}

    def args(self):
        return ["convert", "parquet", str(self.root)]


    def worker_args(self):
        return []


class HiveSource(FileSource):
    """day=N folders of Parquet files: the partition key is a feature."""

    def new_name(self):
        self.seq += 1
        day = self.rng.randint(1, 4)
        return f"day={day}/part-{self.rng.randint(0, 999):03d}-{self.seq:03d}.parquet"

    def mutate(self):
        if self.rng.random() < 0.2:
            day = max([int(r.split("/")[0][4:]) for r in self.files] or [0]) + 1
            self.seq += 1
            self.write(f"day={day}/part-000-{self.seq:03d}.parquet", self.next_ids(self.n_rows()))
            return "new-partition", set()
        return super().mutate()


class TfrecordSource(FileSource):
    suffix = ".tfrecord"
    exact = False

    def encode(self, ids):
        return b"".join(frame(example(i, i * 0.5)) for i in ids)

    def args(self):
        return ["convert", "tfrecord", str(self.root)]


class DeltaSource(Source):
    """A Delta table written by deltalake; deletion vectors written by hand."""

    def __init__(self, h):
        super().__init__(h)
        self.extra = False
        self.dv = False   # the table has the deletionVectors feature (deltalake no longer reads it)

    def init(self):
        from deltalake import write_deltalake
        write_deltalake(str(self.root), rows_table(self.next_ids(self.n_rows() + 1)))

    def log(self):
        """The live add actions, by path (a replay of the JSON commits)."""
        live = {}
        logs = sorted((self.root / "_delta_log").glob("*.json"))
        for f in logs:
            for line in f.read_text().splitlines():
                action = json.loads(line)
                if "add" in action:
                    live[action["add"]["path"]] = action["add"]
                elif "remove" in action:
                    live.pop(action["remove"]["path"], None)
        return live, len(logs) - 1

    def deleted(self, add):
        dv = add.get("deletionVector")
        if not dv:
            return set()
        from pyroaring import BitMap
        path = Path(dv["pathOrInlineDv"][len("file://"):])
        data = path.read_bytes()
        at = dv.get("offset", 1)
        (size,) = struct.unpack_from(">I", data, at)
        treemap = data[at + 8:at + 4 + size]
        (buckets,) = struct.unpack_from("<Q", treemap, 0)
        assert buckets == 1
        return set(BitMap.deserialize(treemap[12:]))

    def ids(self):
        live, _ = self.log()
        out = []
        for rel, add in live.items():
            ids = pq.read_table(self.root / rel, columns=["id"])["id"].to_pylist()
            gone = self.deleted(add)
            out.extend(i for k, i in enumerate(ids) if k not in gone)
        return out

    def commit(self, actions):
        _, version = self.log()
        path = self.root / "_delta_log" / f"{version + 1:020d}.json"
        path.write_text("".join(json.dumps(a) + "\n" for a in actions))

    def write_dv(self, rel, add):
        """Deletes some of the file's rows by a deletion vector (its old ones kept)."""
        from pyroaring import BitMap
        rows = pq.read_metadata(self.root / rel).num_rows
        gone = self.deleted(add)
        alive = [k for k in range(rows) if k not in gone]
        if not alive:
            return False
        gone |= set(self.rng.sample(alive, self.rng.randint(1, len(alive))))
        bitmap = BitMap(sorted(gone)).serialize()
        treemap = struct.pack("<I", 1681511377) + struct.pack("<Q", 1) + struct.pack("<I", 0) + bitmap
        dv_path = self.root / f"deletion_vector_{uuid.uuid4()}.bin"
        dv_path.write_bytes(b"\x01" + struct.pack(">I", len(treemap)) + treemap
                            + struct.pack(">I", zlib.crc32(treemap)))
        if not self.dv:
            self.commit([{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                       "readerFeatures": ["deletionVectors"],
                                       "writerFeatures": ["deletionVectors"]}}])
            self.dv = True
        now = int(time.time() * 1000)
        new = dict(add, dataChange=True, deletionVector={
            "storageType": "p", "pathOrInlineDv": f"file://{dv_path}", "offset": 1,
            "sizeInBytes": len(treemap), "cardinality": len(gone)})
        removed = {"path": rel, "deletionTimestamp": now, "dataChange": True, "size": add["size"],
                   "partitionValues": add.get("partitionValues", {})}
        if add.get("deletionVector"):
            removed["deletionVector"] = add["deletionVector"]
        self.commit([{"remove": removed}, {"add": new}])
        return True

    def mutate(self):
        from deltalake import DeltaTable, write_deltalake
        ops = ["append", "append", "overwrite", "delete", "dv", "dv", "nothing"]
        if not self.dv and not self.extra:
            ops.append("schema")
        op = self.rng.choice(ops)
        table = str(self.root)
        before, _ = self.log()
        if op == "append":
            write_deltalake(table, rows_table(self.next_ids(self.n_rows()), self.extra), mode="append",
                            schema_mode="merge" if self.extra else None)
        elif op == "overwrite":
            write_deltalake(table, rows_table(self.next_ids(self.n_rows()), self.extra), mode="overwrite")
        elif op == "schema":
            self.extra = True
            write_deltalake(table, rows_table(self.next_ids(self.n_rows() + 1), True), mode="append",
                            schema_mode="merge")
            return op, set(before)
        elif op == "delete" and not self.dv and before:
            ids = self.ids()
            if ids:
                victim = self.rng.choice(ids)
                DeltaTable(table).delete(f"id = {victim}")
        elif op in ("dv", "delete") and before:
            rel = self.rng.choice(sorted(before))
            if not self.write_dv(rel, before[rel]):
                return "nothing", set()
            return "deletion-vector", {rel}
        else:
            return "nothing", set()
        after, _ = self.log()
        changed = {rel for rel in before if rel not in after or after[rel] != before[rel]}
        return op, changed

    def args(self):
        return ["convert", "delta", str(self.root)]

    def worker_args(self):
        _, version = self.log()
        return ["--version", str(version)]


class IcebergSource(Source):
    """An Iceberg table written by pyiceberg (SQL catalog on SQLite); position delete files
    written by hand."""

    def init(self):
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.schema import Schema
        from pyiceberg.types import DoubleType, LongType, NestedField, StringType
        self.catalog = SqlCatalog("model", uri=f"sqlite:///{self.h.dir}/catalog.db",
                                  warehouse=f"file://{self.root}")
        self.catalog.create_namespace("db")
        schema = Schema(NestedField(1, "id", LongType(), required=False),
                        NestedField(2, "v", DoubleType(), required=False),
                        NestedField(3, "name", StringType(), required=False))
        self.tbl = self.catalog.create_table("db.t", schema=schema, properties={"format-version": "2"})
        self.extra = False
        self.tbl.append(self.arrow(self.next_ids(self.n_rows() + 1)))
        self.deletes = set()

    def arrow(self, ids):
        from pyiceberg.io.pyarrow import schema_to_pyarrow
        return rows_table(ids, self.extra).cast(schema_to_pyarrow(self.tbl.schema()))

    def files(self):
        self.tbl = self.tbl.refresh()
        if self.tbl.current_snapshot() is None:
            return {}
        return {t.file.file_path: (t.file.record_count, tuple(sorted(d.file_path for d in t.delete_files)))
                for t in self.tbl.scan().plan_files()}

    def ids(self):
        self.tbl = self.tbl.refresh()
        if self.tbl.current_snapshot() is None:
            return []
        return self.tbl.scan().to_arrow()["id"].to_pylist()

    @property
    def exact(self):
        return not self.deletes

    def mutate(self):
        from pyiceberg.expressions import EqualTo
        from pyiceberg.manifest import DataFileContent
        from pyiceberg.types import IntegerType
        import iceberg_tables as it
        op = self.rng.choice(["append", "append", "overwrite", "delete", "position", "schema", "nothing"])
        before = self.files()
        if op == "append":
            self.tbl.append(self.arrow(self.next_ids(self.n_rows())))
        elif op == "overwrite":
            self.tbl.overwrite(self.arrow(self.next_ids(self.n_rows())))
        elif op == "schema" and not self.extra:
            with self.tbl.update_schema() as update:
                update.add_column("extra", IntegerType())
            self.tbl = self.tbl.refresh()
            self.extra = True
            self.tbl.append(self.arrow(self.next_ids(self.n_rows() + 1)))
            return op, {self.relative(p) for p in before}
        elif op == "delete" and before:
            ids = self.ids()
            if not ids:
                return "nothing", set()
            self.tbl.delete(delete_filter=EqualTo("id", self.rng.choice(ids)))
        elif op == "position" and before:
            path = self.rng.choice(sorted(before))
            rows = before[path][0]
            if not rows:
                return "nothing", set()
            positions = sorted(self.rng.sample(range(rows), self.rng.randint(1, rows)))
            table = pa.table([pa.array([path] * len(positions), pa.string()), pa.array(positions, pa.int64())],
                             schema=it.with_ids([("file_path", pa.string(), it.FILE_PATH_ID),
                                                 ("pos", pa.int64(), it.POS_ID)]))
            name = f"pos-{uuid.uuid4()}"
            it.commit_deletes(self.tbl, [it.delete_file(self.tbl, name, table,
                                                        DataFileContent.POSITION_DELETES)])
            self.deletes.add(name)
        else:
            return "nothing", set()
        after = self.files()
        changed = {p for p in before if p not in after or after[p] != before[p]}
        return op, {self.relative(p) for p in changed}

    def relative(self, uri):
        """A data file as the manifest names it below the table."""
        location = self.tbl.metadata.location.rstrip("/")
        return uri[len(location) + 1:] if uri.startswith(location) else uri

    def args(self):
        location = self.tbl.metadata.location
        return ["convert", "iceberg", location[len("file://"):] if location.startswith("file://") else location]

    def worker_args(self):
        self.tbl = self.tbl.refresh()
        snap = self.tbl.current_snapshot()
        return ["--snapshot-id", str(snap.snapshot_id)] if snap else []


SOURCES = {"parquet": FileSource, "hive": HiveSource, "tfrecord": TfrecordSource,
           "delta": DeltaSource, "iceberg": IcebergSource}


# --- One history -------------------------------------------------------------------------

class History:
    def __init__(self, seed, work, binary, kinds, steps, say):
        self.seed = seed
        self.rng = random.Random(seed)
        # The names and snapshot ids pyiceberg draws, and our own, from the seed: a replay
        # writes the same table (deltalake names its files in Rust, at random).
        names = random.Random(seed * 7919 + 1)
        uuid.uuid4 = lambda: uuid.UUID(int=names.getrandbits(128), version=4)
        self.kind = kinds[self.rng.randrange(len(kinds))]
        self.dir = work / f"h{seed}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.bin = binary
        self.out = self.dir / "out"
        self.full = self.dir / "full"
        self.next_id = 0
        self.say = say
        self.steps = steps
        rng = self.rng
        self.split = rng.random() < 0.25
        self.shuffle = rng.random() < 0.15
        self.gzip = not self.shuffle and rng.random() < 0.15
        self.index = not self.gzip and rng.random() < 0.3
        self.retain = rng.choice([None, None, 1, 2])
        self.stats = rng.random() < 0.6
        self.prefixes = ["test", "train"] if self.split else ["data"]
        self.source = SOURCES[self.kind](self)

    def flags(self):
        f = []
        if self.split:
            f += ["--split", "train=0.7,test=0.3", "--split-key", "id"]
        if self.shuffle:
            f += ["--shuffle", "--seed", "5"]
        if self.gzip:
            f += ["--compression", "gzip"]
        if self.index:
            f += ["--index"]
        if self.stats:
            f += ["--stats"]
        return f

    def size(self):
        """This step's shard size (the same for its every run: workers and reruns)."""
        return ["--max-records-per-shard", str(self.step_size)]

    def new_size(self):
        self.step_size = self.rng.choice([1, 2, 3, 5, 8, 20, 100])

    def run(self, args, env=None, check=True):
        e = dict(os.environ, **(env or {}))
        done = subprocess.run([str(self.bin)] + args, capture_output=True, text=True, env=e)
        if check and done.returncode != 0:
            raise Violation(f"tfshard {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def append(self, extra=(), env=None, check=True):
        args = self.source.args() + ["-o", str(self.out), "--append", "--json", "--quiet"] + self.flags() + self.size()
        if self.retain:
            args += ["--retain", str(self.retain)]
        return self.run(args + list(extra), env=env, check=check)

    # The set as it is.
    def manifests(self):
        out = {}
        for p in self.prefixes:
            m = self.out / f"{p}.manifest.json"
            if m.exists():
                out[p] = json.loads(m.read_text())
        return out

    def shard_hashes(self):
        return {p: {s["file"]: hashlib.sha256((self.out / s["file"]).read_bytes()).hexdigest()
                    for s in m["shards"]} for p, m in self.manifests().items()}

    def live(self, folder):
        per = {}
        for p in self.prefixes:
            m = json.loads((folder / f"{p}.manifest.json").read_text())
            per[p] = Counter(x for s in m["shards"] for x in payloads(folder / s["file"]))
        return per

    def check(self, what, before, changed, retire_exact):
        """The checks after a step (see the module docs)."""
        verify = self.run(["verify", str(self.out), "--deep", "--json"], check=False)
        report = json.loads(verify.stdout or "{}")
        if verify.returncode != 0 or not report.get("ok"):
            raise Violation(f"{what}: verify --deep: {verify.stdout.strip()[:2000]} {verify.stderr.strip()}")
        for pinned in sorted(self.out.glob("*.manifest-g*.json")):
            v = self.run(["verify", str(pinned), "--json"], check=False)
            if v.returncode != 0:
                raise Violation(f"{what}: the pinned manifest {pinned.name} does not verify: {v.stdout.strip()[:1000]}")
        self.check_stats(what)
        args = self.source.args() + ["-o", str(self.full), "--overwrite", "--quiet"] + self.flags()
        self.run(args)
        live, full = self.live(self.out), self.live(self.full)
        for p in self.prefixes:
            if live[p] != full[p]:
                raise Violation(f"{what}: {p}'s live records are not a full conversion's: "
                                f"{sum((live[p] - full[p]).values())} extra, {sum((full[p] - live[p]).values())} missing")
        ids = sorted(id_of(x) for p in self.prefixes for x in live[p].elements())
        want = sorted(self.source.ids())
        if ids != want:
            raise Violation(f"{what}: the live ids are not the snapshot's: {len(ids)} live, {len(want)} in the table, "
                            f"extra {sorted((Counter(ids) - Counter(want)))[:5]}, missing {sorted((Counter(want) - Counter(ids)))[:5]}")
        if before is None:
            return
        after = self.manifests()
        hashes = self.shard_hashes()
        for p, m in before["manifests"].items():
            new = after[p]
            gens = new.get("generations") or []
            newest = gens[-1] if gens else None
            grew = newest is not None and newest["generation"] > (before["generation"][p])
            retired = set(newest["retired"]) if grew else set()
            listed = {s["file"] for s in new["shards"]}
            for s in m["shards"]:
                f = s["file"]
                if f in retired:
                    continue
                if f not in listed:
                    raise Violation(f"{what}: {p}: {f} is gone but not retired")
                if hashes[p][f] != before["hashes"][p][f]:
                    raise Violation(f"{what}: {p}: {f} was kept but its bytes changed")
            touching = {s["file"] for s in m["shards"]
                        if any(self.changed_input(x["input"], changed) for x in s.get("sources", []))}
            if not touching <= retired and grew:
                raise Violation(f"{what}: {p}: shards holding changed inputs kept: {sorted(touching - retired)}")
            if retire_exact and grew:
                extra = {f for f in retired - touching
                         if any(s["file"] == f and s["records"] > 0 for s in m["shards"])}
                if extra:
                    raise Violation(f"{what}: {p}: shards retired that hold no changed input: {sorted(extra)}")

    def check_stats(self, what):
        """With --stats: the statistics the set keeps are those of exactly its live shards
        (as `stats` computes them from the shard files, partials merged in shard order)."""
        if not self.stats:
            return
        for p, m in self.manifests().items():
            if "stats" not in m:
                raise Violation(f"{what}: {p}'s manifest names no statistics")
            stored = json.loads(self.run(["stats", str(self.out / f"{p}.manifest.json"), "--json"]).stdout)
            files = [str(self.out / s["file"]) for s in m["shards"]]
            computed = json.loads(self.run(["stats", "--json"] + files).stdout)
            if stored != computed:
                a = {f["name"]: f for f in stored["features"]}
                b = {f["name"]: f for f in computed["features"]}
                diff = [n for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
                raise Violation(f"{what}: {p}'s stored statistics are not its live shards' "
                                f"({stored['records']} records stored, {computed['records']} live; "
                                f"features differing: {diff[:3]}: {[a.get(n) for n in diff[:1]]} != {[b.get(n) for n in diff[:1]]})")

    def changed_input(self, name, changed):
        return any(name == c or name.endswith("/" + c) for c in changed)

    def snapshot_of_set(self):
        ms = self.manifests()
        return {"manifests": ms, "hashes": self.shard_hashes(),
                "generation": {p: max([g["generation"] for g in m.get("generations") or []] or [0])
                               for p, m in ms.items()}}

    def append_step(self):
        """One way of running the append; returns its name."""
        mode = self.rng.choice(["plain", "plain", "resume", "workers", "kill", "kill", "two"])
        if self.shuffle and mode == "workers":
            mode = "plain"
        if mode == "plain":
            self.append()
        elif mode == "resume":
            self.append(["--resume"])
        elif mode == "workers":
            n = self.rng.randint(2, 3)
            for i in range(n):
                self.append(["--num-workers", str(n), "--worker-index", str(i)] + self.source.worker_args())
            self.run(["finalize", str(self.out), "--quiet"])
            mode += f" x{n}"
        elif mode == "kill":
            point = self.rng.choice(FAILPOINTS)
            # (shard:journaled: a shard finished and journaled, with --resume.)
            resume = point == "shard:journaled" or self.rng.random() < 0.5
            extra = ["--resume"] if resume else []
            done = self.append(extra, env={"TFSHARD_FAILPOINTS": f"{point}=exit"}, check=False)
            if done.returncode not in (0, 137):
                raise Violation(f"killed at {point}: exit {done.returncode}: {done.stderr.strip()}")
            # The set a kill leaves verifies, but for the shards it left unlisted (which
            # the next run clears).
            v = json.loads(self.run(["verify", str(self.out), "--json"], check=False).stdout or "{}")
            bad = [p for p in v.get("problems", []) if not p["problem"].startswith("unlisted shard")]
            if "problems" not in v or bad:
                raise Violation(f"killed at {point}: the set left does not verify: {bad or v}")
            self.append(extra)
            mode += f" at {point}{' --resume' if resume else ''}"
        elif mode == "two":
            args = self.source.args() + ["-o", str(self.out), "--append", "--quiet"] + self.flags() + self.size()
            procs = [subprocess.Popen([str(self.bin)] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for _ in range(2)]
            outs = [(p.wait(), p.stderr.read()) for p in procs]
            for code, err in outs:
                if code not in (0, 1) or (code == 1 and "another run is publishing" not in err):
                    raise Violation(f"two appends at once: exit {code}: {err.strip()}")
            if all(code == 1 for code, _ in outs):
                raise Violation("two appends at once: neither published")
            # One published; the other, refused, leaves nothing to do but what the next
            # run finds.
            self.append()
        return mode

    def go(self):
        self.new_size()
        self.source.init()
        first = self.source.args() + ["-o", str(self.out), "--quiet"] + self.flags() + self.size()
        self.run(first)
        self.say(f"h{self.seed}: {self.kind}, split={self.split}, shuffle={self.shuffle}, gzip={self.gzip}, "
                 f"index={self.index}, retain={self.retain}, stats={self.stats}")
        self.check("generation 0", None, set(), False)
        for step in range(self.steps):
            self.new_size()
            before = self.snapshot_of_set()
            action = self.rng.random()
            if action < 0.08:
                self.run(["compact", str(self.out), "--quiet"] + (["--prefix", self.prefixes[0]] if self.split else []))
                self.say(f"  step {step}: compact")
                self.check(f"step {step} (compact)", None, set(), False)
                continue
            if action < 0.13:
                self.source.mutate()
                args = self.source.args() + ["-o", str(self.out), "--overwrite", "--quiet"] + self.flags() + self.size()
                self.run(args)
                self.say(f"  step {step}: convert again with --overwrite")
                self.check(f"step {step} (overwrite)", None, set(), False)
                continue
            ops = [self.source.mutate() for _ in range(self.rng.randint(0, 2))]
            changed = set().union(*(c for _, c in ops)) if ops else set()
            nothing = all(op == "nothing" for op, _ in ops)
            if nothing and self.rng.random() < 0.5:
                done = self.append()
                summary = json.loads(done.stdout)
                if not summary.get("up_to_date"):
                    raise Violation(f"step {step}: nothing changed, yet: {done.stdout.strip()}")
                after = self.snapshot_of_set()
                if after["manifests"] != before["manifests"]:
                    raise Violation(f"step {step}: nothing changed, yet the manifest did")
                self.say(f"  step {step}: nothing changed: up to date")
                continue
            mode = self.append_step()
            self.say(f"  step {step}: {[op for op, _ in ops]} changed {sorted(changed)}, appended: {mode}")
            schema = any(op == "schema" for op, _ in ops)
            exact = self.source.exact and not self.split and not self.shuffle and not schema
            self.check(f"step {step} ({[op for op, _ in ops]}, {mode})", before, changed, exact)


def one(args):
    seed, work, binary, kinds, steps, verbose, keep = args
    lines = []
    say = (lambda s: print(s, flush=True)) if verbose else lines.append
    h = None
    try:
        h = History(seed, Path(work), binary, kinds, steps, say)
        h.go()
        if not keep:
            shutil.rmtree(h.dir, ignore_errors=True)
        return seed, None, lines
    except Violation as v:
        return seed, str(v), lines
    except Exception:
        return seed, traceback.format_exc(), lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tfshard", default="target/debug/tfshard")
    ap.add_argument("--histories", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0, help="the first history's seed")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--work", default="target/model-appends")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--replay", type=int, help="one history, told step by step, its files kept")
    a = ap.parse_args()
    binary = Path(a.tfshard).resolve()
    kinds = a.kinds.split(",")
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if a.replay is not None:
        seed, problem, _ = one((a.replay, work, binary, kinds, a.steps, True, True))
        if problem:
            print(f"VIOLATION: {problem}")
            sys.exit(1)
        print("no violation")
        return
    started = time.time()
    jobs = [(s, work, binary, kinds, a.steps, False, False) for s in range(a.seed, a.seed + a.histories)]
    failed = []
    counts = Counter()
    with multiprocessing.Pool(a.jobs) as pool:
        for seed, problem, lines in pool.imap_unordered(one, jobs):
            counts["histories"] += 1
            counts["steps"] += sum(1 for line in lines if line.startswith("  step"))
            if problem:
                failed.append(seed)
                print(f"history {seed}: VIOLATION: {problem}")
                print("\n".join(lines))
                print(f"replay: python scripts/model_appends.py --tfshard {a.tfshard} --replay {seed} "
                      f"--steps {a.steps} --kinds {a.kinds}")
    print(f"{counts['histories']} histories, {counts['steps']} steps, {len(failed)} violations, "
          f"{time.time() - started:.0f} s ({', '.join(kinds)})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
