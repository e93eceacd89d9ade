"""The trainer's reader against a model: random schedules (record counts 0, 1, primes,
2^k +- 1; shard sizes; with and without .idx; global, blocks and buffer shuffles; ranks,
batch sizes, drop_remainder, even_batches; epochs; DataLoader workers, fork and spawn; a
state taken by Dataset or StatefulDataLoader after any step and loaded by either under
another configuration). After each, over every rank:

- every record is read exactly once in the epoch, but for the last step: its records
  dropped with drop_remainder, or read again by the ranks it left none (at most
  ranks - 1, only where fewer records than ranks remain) with even ranks;
- len() is the batches each rank yields; ranks yield as many by default;
- a load that cannot continue exactly refuses with ValueError, and the model says which.

TFSHARD_READER_SCHEDULES sets how many (default 500; each prints its seed on failure,
and TFSHARD_READER_SEED=S replays one). Runs where torch is (scripts/torch_venv.sh's
venv, as .ci/run runs it); the in-process schedules need no torch.
"""

import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import numpy.random  # noqa: F401  (imported before any fork: torchdata's workers seed it, and a
#                     lazy import racing another thread's breaks the child's import lock)
import pytest

import tfshard

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from tfrecord_bytes import example, frame  # noqa: E402

EMPTY = None
COUNTS = [0, 1, 2, 3, 5, 7, 13, 31, 63, 64, 65, 97, 127, 128, 129, 257, 1001, 1009]


@pytest.fixture(scope="module")
def sets(tmp_path_factory, tfshard_bin):
    """One shard set per record count: records with ids 0..n-1, in shards of a few sizes,
    some with .idx files."""
    root = tmp_path_factory.mktemp("reader-model")
    global EMPTY
    EMPTY = root / "set-0-"
    made = {}
    rng = random.Random(0)
    for n in COUNTS:
        src = root / f"in-{n}.tfrecord"
        src.write_bytes(b"".join(frame(example(i, i * 0.5)) for i in range(n)))
        for index in (False, True):
            out = root / f"set-{n}-{int(index)}"
            per = rng.choice([1, 2, 7, 50, 1000])
            args = [tfshard_bin, "convert", "tfrecord", str(src), "-o", str(out), "--quiet",
                    "--max-records-per-shard", str(per)] + (["--index"] if index else [])
            done = subprocess.run(args, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            made[(n, index)] = out
    return made


def ids(batch):
    return [int(t) for t in np.asarray(batch["id"]).reshape(-1)]


class Config:
    def __init__(self, rng, shuffle=None):
        self.shuffle = shuffle or rng.choice(["global", "blocks", "buffer"])
        self.ranks = rng.randint(1, 4)
        self.batch = rng.choice([1, 2, 3, 5, 8, 16, 33])
        self.drop = rng.random() < 0.2
        self.even = rng.random() < 0.8
        self.block = rng.choice([None, 1, 3, 16])
        self.window = rng.randint(1, 4)

    def dataset(self, path, rank, seed, **kw):
        return tfshard.Dataset(path, batch_size=self.batch, shuffle=self.shuffle, shuffle_buffer=8, seed=seed,
                               num_shards=self.ranks, shard_index=rank, drop_remainder=self.drop,
                               even_batches=self.even, window=self.window,
                               # (A set of no records has no features to name.)
                               columns=None if str(path).startswith(str(EMPTY)) else ["id"],
                               block_size=self.block if self.shuffle == "blocks" else None, threads=2, **kw)

    def __repr__(self):
        return (f"{self.shuffle} ranks={self.ranks} batch={self.batch} drop={self.drop} even={self.even} "
                f"block={self.block} window={self.window}")


def expected_repeats(remaining, c):
    """Records read twice in the last step of `remaining` records under `c`."""
    if c.drop or not c.even:
        return 0
    if c.shuffle == "buffer":
        m = remaining % (c.batch * c.ranks)
    else:
        m = remaining % (c.batch * c.ranks)
    return c.ranks - m if 0 < m < c.ranks else 0


def check_epoch(read, n, c, start, what):
    """`read` (a Counter of ids) is one epoch's from global position `start` (global and
    blocks; the records before it read already, elsewhere) under `c`."""
    remaining = n - start
    if c.drop:
        assert max(read.values(), default=1) == 1, f"{what}: a record read twice: {read.most_common(3)}"
        if c.shuffle == "buffer":
            per = n // c.ranks // c.batch * c.batch
            assert sum(read.values()) == per * c.ranks, what
        else:
            span = c.batch * c.ranks
            assert sum(read.values()) == remaining // span * span, what
        return
    assert sum(read.values()) == remaining + expected_repeats(remaining, c), \
        f"{what}: {sum(read.values())} read of {remaining} (+{expected_repeats(remaining, c)} repeats)"
    assert len(read) == remaining, f"{what}: {remaining - len(read)} records never read"


def one_epoch(path, c, seed, epoch):
    """Every rank's batches of one epoch, in process: (ids read, batches per rank)."""
    read, counts = Counter(), []
    for r in range(c.ranks):
        ds = c.dataset(path, r, seed)
        ds.set_epoch(epoch)
        batches = [ids(b) for b in ds]
        assert len(ds) == len(batches), f"len() {len(ds)}, yielded {len(batches)}"
        counts.append(len(batches))
        read.update(i for b in batches for i in b)
    return read, counts


def schedule(seed, sets):
    rng = random.Random(seed)
    n = rng.choice(COUNTS)
    path = sets[(n, rng.random() < 0.5)]
    c = Config(rng)
    what = f"schedule {seed}: {n} records, {c}"
    kind = rng.random()
    data_seed = rng.randint(0, 99)
    if kind < 0.45:
        read, counts = one_epoch(path, c, data_seed, rng.randint(0, 2))
        check_epoch(read, n, c, 0, what)
        if c.even or c.drop:
            assert len(set(counts)) <= 1, f"{what}: ranks yield {counts}"
        else:
            assert max(counts) - min(counts) <= 1, f"{what}: {counts}"
        return "epoch"
    # Resumed: every rank reads k batches (ranks advance together), states taken, then
    # the rest under `d`.
    k = rng.randint(0, min(len(c.dataset(path, r, data_seed)) for r in range(c.ranks)))
    first, states = Counter(), []
    for r in range(c.ranks):
        ds = c.dataset(path, r, data_seed)
        it = iter(ds)
        for _ in range(k):
            first.update(ids(next(it)))
        states.append(ds.state_dict())
        del it
    if c.shuffle == "buffer":
        d = c
    else:
        d = Config(rng, shuffle=c.shuffle)
        d.block, d.window = c.block, c.window
    rest = Counter()
    for r in range(d.ranks):
        ds = d.dataset(path, r, data_seed)
        state = states[r % c.ranks]
        if c.shuffle == "buffer" and r >= c.ranks:
            continue
        if rng.random() < 0.5:
            ds.load_state_dict(state)
        else:
            ds = d.dataset(path, r, data_seed, state=state)
        rest.update(i for b in ds for i in ids(b))
    if c.shuffle == "buffer":
        check_epoch(first + rest, n, c, 0, what + " resumed")
        return "resume buffer"
    # The position the states hold: the steps every rank took (k batches each, or fewer at
    # the end).
    span = c.batch * c.ranks
    start = min(states[0]["start"] + states[0]["batches"] * span, n)
    assert all(s["batches"] == states[0]["batches"] for s in states), what
    # The first run's part is whole steps; the rest, from its position, under `d`.
    check_epoch(rest, n, d, start, f"{what}, resumed at {start} as {d}")
    assert not (set(first) & set(rest)), f"{what}: records read before and after the resume"
    if not c.drop and not d.drop:
        assert set(first) | set(rest) == set(range(n)), f"{what}: records never read"
    return "resume"


def test_reader_schedules_in_process(sets):
    replay = os.environ.get("TFSHARD_READER_SEED")
    seeds = [int(replay)] if replay else range(int(os.environ.get("TFSHARD_READER_SCHEDULES", "500")))
    kinds = Counter()
    for seed in seeds:
        try:
            kinds[schedule(seed, sets)] += 1
        except AssertionError as e:
            raise AssertionError(f"{e}\nreplay: TFSHARD_READER_SEED={seed} pytest {__file__}") from None
    print(f"reader schedules: {dict(kinds)}")


torch = pytest.importorskip("torch")


def loader_epoch(path, c, seed, workers, context, epoch=0):
    from torch.utils.data import DataLoader
    read, counts = Counter(), []
    for r in range(c.ranks):
        ds = c.dataset(path, r, seed)
        ds.set_epoch(epoch)
        loader = DataLoader(ds, batch_size=None, num_workers=workers,
                            multiprocessing_context=context if workers else None)
        batches = [ids(b) for b in loader]
        assert len(ds) == len(batches), f"len() {len(ds)}, yielded {len(batches)}"
        counts.append(len(batches))
        read.update(i for b in batches for i in b)
    return read, counts


@pytest.mark.parametrize("seed", range(int(os.environ.get("TFSHARD_READER_LOADER_SCHEDULES", "16"))))
def test_reader_schedules_in_data_loader_workers(sets, seed):
    rng = random.Random(10_000 + seed)
    n = rng.choice(COUNTS[4:])
    path = sets[(n, rng.random() < 0.5)]
    c = Config(rng)
    workers = rng.randint(1, 3)
    context = "spawn" if seed % 4 == 0 else "fork"
    read, counts = loader_epoch(path, c, rng.randint(0, 99), workers, context, rng.randint(0, 2))
    what = f"{n} records, {c}, {workers} {context} workers"
    check_epoch(read, n, c, 0, what)
    if c.even or c.drop:
        assert len(set(counts)) <= 1, f"{what}: {counts}"


def stateful(path, c, seed, workers, rank):
    from torchdata.stateful_dataloader import StatefulDataLoader
    return StatefulDataLoader(c.dataset(path, rank, seed), batch_size=None, num_workers=workers,
                              multiprocessing_context="fork")


@pytest.mark.parametrize("shuffle", ["global", "blocks"])
def test_a_stateful_loader_resumed_under_another_world_size_is_exact_or_refuses(sets, shuffle):
    """The issue's case: 2 ranks x 2 workers x batches of 32, 20 steps, the loaders'
    states; resumed at 3 ranks x batches of 48 through loader.load_state_dict alone (each
    worker handed its own state): refused, naming what differs (it silently skipped 1,600
    of 5,000 records before); with the whole state loaded into the Dataset first: every
    record once."""
    pytest.importorskip("torchdata")
    path = sets[(1009, True)]
    n, seed = 1009, 3
    c = Config(random.Random(0), shuffle=shuffle)
    c.ranks, c.batch, c.drop, c.even, c.block, c.window = 2, 8, False, True, 3, 2
    first, states = Counter(), []
    for r in range(2):
        loader = stateful(path, c, seed, 2, r)
        it = iter(loader)
        for _ in range(20):
            first.update(ids(next(it)))
        states.append(loader.state_dict())
        del it, loader
    d = Config(random.Random(0), shuffle=shuffle)
    d.ranks, d.batch, d.drop, d.even, d.block, d.window = 3, 12, False, True, 3, 2
    with pytest.raises(Exception, match="one worker's state cannot say where the epoch stands"):
        loader = stateful(path, d, seed, 2, 0)
        loader.load_state_dict(states[0])
        list(loader)
    rest = Counter()
    for r in range(3):
        loader = stateful(path, d, seed, 2, r)
        loader.dataset.load_state_dict(states[r % 2])
        loader.load_state_dict(states[r % 2])
        rest.update(i for b in loader for i in ids(b))
    assert not (set(first) & set(rest))
    start = 20 * 8 * 2
    check_epoch(rest, n, d, start, "resumed")
    assert len(first) == start


@pytest.mark.parametrize("shuffle", ["global", "buffer"])
def test_ranks_stay_even_under_a_data_loader(sets, shuffle):
    """The issue's case: 1,001 records, batches of 10, 4 ranks read 25, 25, 25 and 26
    batches (under DDP the fourth waits forever in its all-reduce). Every rank yields 26
    now, the three ranks the last step left none reading a record again;
    even_batches=False gives the counts of before."""
    path = sets[(1001, False)]
    c = Config(random.Random(0), shuffle=shuffle)
    c.ranks, c.batch, c.drop, c.even = 4, 10, False, True
    read, counts = loader_epoch(path, c, 1, 2, "fork")
    assert counts == [26, 26, 26, 26]
    check_epoch(read, 1001, c, 0, "even")
    assert sum(read.values()) == 1004
    c.even = False
    read, counts = loader_epoch(path, c, 1, 2, "fork")
    assert sorted(counts) == [25, 25, 25, 26]
    assert sum(read.values()) == 1001 and len(read) == 1001


@pytest.mark.parametrize("seed", range(int(os.environ.get("TFSHARD_READER_STATEFUL_SCHEDULES", "8"))))
def test_stateful_loader_schedules(sets, seed):
    """Random StatefulDataLoader resumes: a state taken after any number of steps, loaded
    through the loader alone (exact under the same workers, batch size and ranks, else a
    ValueError naming what differs) or into the Dataset first (exact under any)."""
    pytest.importorskip("torchdata")
    rng = random.Random(20_000 + seed)
    n = rng.choice(COUNTS[6:])
    path = sets[(n, rng.random() < 0.5)]
    c = Config(rng, shuffle=rng.choice(["global", "blocks"]))
    c.drop = False
    workers = rng.randint(1, 3)
    data_seed = rng.randint(0, 99)
    steps = min(len(c.dataset(path, r, data_seed)) for r in range(c.ranks))
    k = rng.randint(0, steps)
    first, states = Counter(), []
    for r in range(c.ranks):
        loader = stateful(path, c, data_seed, workers, r)
        it = iter(loader)
        for _ in range(k):
            first.update(ids(next(it)))
        states.append(loader.state_dict())
        del it, loader
    same = rng.random() < 0.4
    d = Config(rng, shuffle=c.shuffle)
    d.drop, d.block, d.window = False, c.block, c.window
    if same:
        d.ranks, d.batch, d.even = c.ranks, c.batch, c.even
    whole = rng.random() < 0.5
    what = f"{n} records, {c} x {workers} workers, {k} steps, resumed as {d} ({'whole state' if whole else 'loader alone'})"
    refused = not whole and (d.batch, d.ranks) != (c.batch, c.ranks)
    rest = Counter()
    for r in range(d.ranks):
        loader = stateful(path, d, data_seed, workers, r)
        if whole:
            loader.dataset.load_state_dict(states[r % c.ranks])
        loader.load_state_dict(states[r % c.ranks])
        if refused:
            with pytest.raises(Exception, match="one worker's state cannot say where the epoch stands"):
                list(loader)
            return
        rest.update(i for b in loader for i in ids(b))
    start = min(k * c.batch * c.ranks, n)
    check_epoch(rest, n, d, start, what)
    assert not (set(first) & set(rest)), what
    assert set(first) | set(rest) == set(range(n)), what
