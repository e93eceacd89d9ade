#!/usr/bin/env python3
"""Is the accelerator fed? First the readers alone (before torch's threads are busy):
records/s of the sequential Dataset, shuffle="global" and "blocks", Records[i] one at a
time and Records[batch of 256 random indices]. Then a small model trained for a fixed
number of steps, fed by tfshard (Dataset with each shuffle, Records through a
DataLoader) beside the same model fed by synthetic tensors already in memory; prints
samples/s and the share of each step's time spent waiting for input.

    python scripts/bench_trainer.py SHARDS [--steps N] [--batch-size B] [--device cpu|cuda]
    python scripts/bench_trainer.py SHARDS --tiny      # CI: a few steps, CPU
    python scripts/bench_trainer.py SHARDS --reader R  # one reader alone, two epochs:
        # seq, global, blocks, blocks-marks (blocks over a 1 MiB table bound: one offset
        # a block), records1 (Records[i]), records256 (Records[256 random])

SHARDS: uncompressed shards with a float feature `x` of fixed shape (the standard
table's, or testdata/small.parquet's) and an int64 `y`. Runs where torch is installed
(scripts/torch_venv.sh).
"""
import argparse
import os
import random
import time

import numpy as np
import torch

import tfshard


def model_for(width, device):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(width, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 1),
    ).to(device)


def train(name, batches, steps, width, device):
    """Trains for `steps` steps on `batches` (x, y tensors); returns samples/s and prints
    them with the share of the time spent waiting for the next batch (`name` None: a
    warm-up, not printed)."""
    model = model_for(width, device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    waited = samples = 0.0
    it = iter(batches)
    start = time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(batches)
            x, y = next(it)
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        waited += time.perf_counter() - t
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        samples += len(x)
    if device == "cuda":
        torch.cuda.synchronize()
    total = time.perf_counter() - start
    if name is not None:
        print(f"{name:<44} {samples / total:>12,.0f} {100 * waited / total:>9.1f}%")
    return samples / total


def as_tensors(batch):
    x = torch.from_numpy(np.asarray(batch["x"], dtype=np.float32))
    y = torch.from_numpy(np.asarray(batch["y"]).astype(np.float32))
    return x.reshape(len(x), -1), y


class Fed:
    """Batches of a reader as (x, y) tensors, epoch after epoch."""

    def __init__(self, make):
        self.make = make

    def __iter__(self):
        for batch in self.make():
            yield as_tensors(batch)


def reader_rate(name, make, records_per_epoch, limit):
    t = time.perf_counter()
    n = 0
    for batch in make():
        n += len(batch["y"])
        if n >= limit:
            break
    rate = n / (time.perf_counter() - t)
    print(f"{name:<44} {rate:>12,.0f}")
    return rate


def anon_peak():
    """A thread sampling the process's anonymous memory (what it allocates, not the
    shards' mapped pages, which are the page cache's) every 2 ms; returns a function
    giving its peak in MiB so far."""
    import threading
    peak = [0]

    def sample():
        while True:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        peak[0] = max(peak[0], int(line.split()[1]) // 1024)
            time.sleep(0.002)

    threading.Thread(target=sample, daemon=True).start()
    return lambda: peak[0]


def reader_alone(shards, reader, b):
    """One reader's records/s, printed as `records seconds first-records first-seconds
    anon-peak-MiB`: a Dataset's second epoch, and its first with the opening (the offset
    table's scan of shards without .idx files, once a process); Records: as many records
    as an epoch, the same figure twice."""
    anon = anon_peak()
    cols = ["x", "y"]
    t = time.perf_counter()
    n = 0
    if reader in ("seq", "global", "blocks", "blocks-marks"):
        kw = {"shuffle_buffer": 0} if reader == "seq" else {"shuffle": reader}
        if reader == "blocks-marks":
            # Over a 1 MiB bound for the offset table: one offset a block, not a record.
            kw = {"shuffle": "blocks", "table_bound": 1 << 20}
        ds = tfshard.Dataset(shards, batch_size=b, columns=cols, seed=1, **kw)
        first = None
        for _ in range(2):
            for batch in ds:
                n += len(batch["y"])
            if first is None:
                first = (n, time.perf_counter() - t)
                n, t = 0, time.perf_counter()
        print(n, time.perf_counter() - t, *first, anon())
        return
    records = tfshard.Records(shards, columns=cols)
    total = len(records)
    t = time.perf_counter()
    rng = np.random.default_rng(1)
    if reader == "records1":
        for i in rng.integers(0, total, min(total, 500_000)).tolist():
            records[i]
            n += 1
    else:
        for _ in range(total // 256):
            n += len(records[rng.integers(0, total, 256)]["y"])
    s = time.perf_counter() - t
    print(n, s, n, s, anon())


def readers_alone(a, records, n, b, cols):
    """Each reader alone, before the model trains (torch's threads then busy): one pass,
    or `limit` records, and the ratios to the sequential Dataset."""
    print(f"{'reader alone (one pass or limit)':<44} {'records/s':>12}")
    limit = n if not a.tiny else min(n, 2000)
    seq = reader_rate("Dataset, sequential (shuffle_buffer=0)",
                      lambda: tfshard.Dataset(a.shards, batch_size=b, shuffle_buffer=0, columns=cols), n, limit)
    glob = reader_rate('Dataset(shuffle="global")',
                       lambda: tfshard.Dataset(a.shards, batch_size=b, shuffle="global", columns=cols), n, limit)
    blocks = reader_rate('Dataset(shuffle="blocks")',
                         lambda: tfshard.Dataset(a.shards, batch_size=b, shuffle="blocks", columns=cols), n, limit)
    # (Records open each shard on its first record: opened before the count, as the
    # Datasets opened theirs in their pass.)
    records[np.linspace(0, n - 1, 8 * len(records.files)).astype(np.int64)]
    one = min(n, 200_000 if not a.tiny else 500)
    picks = [random.randrange(n) for _ in range(one)]
    t = time.perf_counter()
    for i in picks:
        records[i]
    single = one / (time.perf_counter() - t)
    print(f"{'Records[i], one at a time':<44} {single:>12,.0f}")
    batches = [np.random.randint(0, n, 256) for _ in range(max(1, one // 256))]
    t = time.perf_counter()
    for idx in batches:
        records[idx]
    batched = 256 * len(batches) / (time.perf_counter() - t)
    print(f"{'Records[256 random indices]':<44} {batched:>12,.0f}")
    print(f"offset tables of the shards read: {records.table_bytes} bytes")
    print(f"ratios to the sequential Dataset: global {glob / seq:.2f}x, blocks {blocks / seq:.2f}x, "
          f"Records[i] {single / seq:.2f}x, Records[256] {batched / seq:.2f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="a few steps on the CPU (CI)")
    ap.add_argument("--reader", choices=["seq", "global", "blocks", "blocks-marks", "records1", "records256"])
    a = ap.parse_args()
    if a.reader:
        return reader_alone(a.shards, a.reader, a.batch_size)
    if a.tiny:
        a.steps, a.device, a.workers = 20, "cpu", 0
    cols = ["x", "y"]
    records = tfshard.Records(a.shards, columns=cols)
    n = len(records)
    width = int(np.prod(records[0]["x"].shape)) or 1
    b = a.batch_size
    print(f"== {n} records in {len(records.files)} shards; batches of {b}; {a.steps} steps on {a.device}; "
          f"{os.cpu_count()} cores")
    readers_alone(a, records, n, b, cols)
    print()
    print(f"{'fed by':<44} {'samples/s':>12} {'waiting':>10}")
    x = torch.randn(b, width)
    y = torch.randn(b)
    # (Torch's first steps set up its kernels and threads: not counted against the first fed.)
    train(None, [(x, y)] * 8, min(a.steps, 50), width, a.device)
    synthetic = train("synthetic tensors in memory", [(x, y)] * 8, a.steps, width, a.device)
    rates = {}
    for shuffle in ("buffer", "global", "blocks"):
        ds = tfshard.Dataset(a.shards, batch_size=b, shuffle=shuffle, columns=cols, seed=1)
        rates[shuffle] = train(f'Dataset(shuffle="{shuffle}")', Fed(lambda ds=ds: ds), a.steps, width, a.device)
    if a.workers:
        from torch.utils.data import DataLoader
        loader = DataLoader(tfshard.Dataset(a.shards, batch_size=b, shuffle="global", columns=cols, seed=1),
                            batch_size=None, num_workers=a.workers, pin_memory=a.device == "cuda",
                            persistent_workers=True)
        train(f'DataLoader({a.workers} workers) of Dataset(global)', Fed(lambda: loader), a.steps, width, a.device)
        mapped = DataLoader(records, batch_size=b, shuffle=True, num_workers=a.workers,
                            pin_memory=a.device == "cuda", persistent_workers=True)
        train(f"DataLoader({a.workers} workers) of Records", Fed(lambda: mapped), a.steps, width, a.device)
    print(f"input-bound share vs synthetic: buffer {rates['buffer'] / synthetic:.2f}x, "
          f"global {rates['global'] / synthetic:.2f}x, blocks {rates['blocks'] / synthetic:.2f}x")


if __name__ == "__main__":
    main()
