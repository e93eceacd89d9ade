"""The trainer's reader under the real frameworks (scripts/torch_venv.sh's venv, which
.ci/run runs this file in): PyTorch's DataLoader with fork and spawn workers,
pin_memory and persistent workers, DistributedSampler over Records, torchdata's
StatefulDataLoader for elastic resume, and Grain over Records. Elsewhere it skips."""

import os
import sys

import numpy as np
import pytest

import tfshard

if os.environ.get("TFSHARD_REQUIRE_TORCH"):
    import torch  # noqa: F401  (fails the run where the venv lacks it)
torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

COLUMNS = ["ts", "x"]  # ts is unique per record


def ids(batch):
    return [int(t) for t in np.asarray(batch["ts"]).reshape(-1)]


@pytest.fixture(scope="module")
def all_ids(small_shards):
    return sorted(int(t) for t in tfshard.Records(small_shards, columns=["ts"])[list(range(2000))]["ts"])


def dataset(shards, ranks=1, rank=0, shuffle="global", batch=50, **kw):
    return tfshard.Dataset(shards, batch_size=batch, shuffle=shuffle, num_shards=ranks, shard_index=rank,
                           columns=COLUMNS, seed=kw.pop("seed", 3), **kw)


def test_a_dataset_is_an_iterable_dataset_and_import_does_not_load_torch(small_shards, tfshard_bin):
    assert isinstance(dataset(small_shards), torch.utils.data.IterableDataset)
    import subprocess
    code = "import sys, tfshard; assert 'torch' not in sys.modules; tfshard.Dataset(sys.argv[1]); assert 'torch' in sys.modules"
    done = subprocess.run([sys.executable, "-c", code, str(small_shards)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_data_loader_workers_read_every_record_once_per_epoch(small_shards, all_ids, workers):
    ds = dataset(small_shards, shuffle="buffer" if workers == 3 else "global")
    loader = DataLoader(ds, batch_size=None, num_workers=workers, pin_memory=True,
                        persistent_workers=workers > 0)
    epochs = []
    for _ in range(2):
        got = [i for b in loader for i in ids(b)]
        assert sorted(got) == all_ids
        epochs.append(got)
        ds.set_epoch(ds.epoch + 1) if workers == 0 else None
    assert epochs[0] != epochs[1], "another order each epoch"
    again = [i for b in DataLoader(dataset(small_shards, shuffle="buffer" if workers == 3 else "global"),
                                   batch_size=None, num_workers=workers) for i in ids(b)]
    assert again == epochs[0], "the same order for the same (seed, epoch)"


@pytest.mark.parametrize("shuffle", ["global", "blocks"])
def test_ranks_times_workers(small_shards, all_ids, shuffle):
    for ranks in (1, 2, 3, 4):
        for workers in (0, 1, 2, 3):
            got = []
            for r in range(ranks):
                ds = dataset(small_shards, ranks, r, shuffle=shuffle, batch=40)
                loader = DataLoader(ds, batch_size=None, num_workers=workers, multiprocessing_context="fork" if workers else None)
                got.extend(i for b in loader for i in ids(b))
            assert sorted(got) == all_ids, (shuffle, ranks, workers)


def test_spawn_workers(small_shards, all_ids):
    loader = DataLoader(dataset(small_shards, 2, 1), batch_size=None, num_workers=2, multiprocessing_context="spawn")
    other = DataLoader(dataset(small_shards, 2, 0), batch_size=None, num_workers=0)
    got = [i for b in loader for i in ids(b)] + [i for b in other for i in ids(b)]
    assert sorted(got) == all_ids


def test_distributed_sampler_over_records(small_shards, all_ids):
    records = tfshard.Records(small_shards, columns=COLUMNS)
    for ranks in (2, 4):
        got = []
        for r in range(ranks):
            sampler = DistributedSampler(records, num_replicas=ranks, rank=r, shuffle=True, seed=1)
            loader = DataLoader(records, batch_size=64, sampler=sampler, num_workers=2)
            for batch in loader:
                assert batch["x"].shape[1:] == (8,) and batch["x"].dtype == torch.float32
                got.extend(ids(batch))
        assert sorted(got) == all_ids


@pytest.mark.parametrize("shuffle", ["global", "blocks"])
def test_elastic_resume_under_stateful_data_loader(small_shards, all_ids, shuffle):
    from torchdata.stateful_dataloader import StatefulDataLoader

    ranks, workers, k = 4, 2, 3
    seen, states = [], []
    for r in range(ranks):
        loader = StatefulDataLoader(dataset(small_shards, ranks, r, shuffle=shuffle, batch=32), batch_size=None,
                                    num_workers=workers, multiprocessing_context="fork")
        it = iter(loader)
        for _ in range(k):
            seen.extend(ids(next(it)))
        states.append(loader.state_dict())
        del it, loader
    for new_ranks, new_workers, batch in ((3, 0, 48), (2, 3, 20)):
        rest = []
        for r in range(new_ranks):
            ds = dataset(small_shards, new_ranks, r, shuffle=shuffle, batch=batch)
            ds.load_state_dict(states[r])
            loader = StatefulDataLoader(ds, batch_size=None, num_workers=new_workers)
            rest.extend(i for b in loader for i in ids(b))
        assert sorted(seen + rest) == all_ids, (new_ranks, new_workers)


@pytest.mark.parametrize("shuffle", ["buffer", "global"])
def test_mid_epoch_resume_inside_workers(small_shards, all_ids, shuffle):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader():
        return StatefulDataLoader(dataset(small_shards, shuffle=shuffle), batch_size=None, num_workers=2,
                                  multiprocessing_context="fork")
    first = loader()
    it = iter(first)
    seen = [i for _ in range(5) for i in ids(next(it))]
    state = first.state_dict()
    del it, first
    again = loader()
    again.load_state_dict(state)
    rest = [i for b in again for i in ids(b)]
    assert sorted(seen + rest) == all_ids


def test_grain_reads_records(small_shards, all_ids):
    grain = pytest.importorskip("grain")
    records = tfshard.Records(small_shards, columns=COLUMNS)
    batches = grain.MapDataset.source(records).shuffle(seed=1).batch(64)
    got = [i for b in batches for i in ids(b)]
    assert sorted(got) == all_ids and got != all_ids
    loader = grain.DataLoader(
        data_source=records,
        sampler=grain.samplers.IndexSampler(num_records=len(records), shuffle=True, seed=1, num_epochs=1),
        operations=[grain.transforms.Batch(batch_size=64)],
        worker_count=2,
    )
    got = [i for b in loader for i in ids(b)]
    assert sorted(got) == all_ids
