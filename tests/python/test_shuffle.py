"""Dataset(shuffle="global" | "blocks"): every record exactly once per epoch over all
ranks and DataLoader workers, another order each epoch, the same for the same (seed,
epoch), and elastic resume. DataLoader workers are stood for here by the worker the
module asks torch for (tests/python/test_torch.py runs real DataLoaders)."""

import contextlib

import numpy as np
import pytest

import tfshard


@contextlib.contextmanager
def as_worker(worker, workers):
    saved = tfshard._data_loader_worker
    tfshard._data_loader_worker = lambda: (worker, workers)
    try:
        yield
    finally:
        tfshard._data_loader_worker = saved


def ids(batch):
    return [bytes(i) for i in batch["id"]]


def dataset(shards, mode, ranks, rank, batch=64, **kw):
    return tfshard.Dataset(shards, batch_size=batch, shuffle=mode, num_shards=ranks, shard_index=rank,
                           columns=["id"], seed=kw.pop("seed", 5), **kw)


def loader_order(readers):
    """What a DataLoader yields of its workers' iterators: one batch of each in turn."""
    its = [iter(r) for r in readers]
    out, live = [], list(range(len(its)))
    while live:
        for w in list(live):
            try:
                out.append(next(its[w]))
            except StopIteration:
                live.remove(w)
    return out


def one_epoch(shards, mode, ranks, workers, epoch=0, batch=64, drop=False):
    """Every rank's batches (each rank's DataLoader order), by rank."""
    by_rank = []
    for r in range(ranks):
        readers = []
        for w in range(workers):
            ds = dataset(shards, mode, ranks, r, batch=batch, drop_remainder=drop)
            ds.set_epoch(epoch)
            with as_worker(w, workers):
                readers.append(iter(ds))
        by_rank.append(loader_order(readers))
    return by_rank


@pytest.fixture(scope="module")
def all_ids(small_shards):
    return sorted(bytes(i) for b in tfshard.Dataset(small_shards, batch_size=500, shuffle_buffer=0, columns=["id"]) for i in b["id"])


@pytest.mark.parametrize("mode", ["global", "blocks"])
def test_every_record_once_over_ranks_and_workers(small_shards, all_ids, mode):
    for ranks in (1, 2, 3, 4):
        for workers in (1, 2, 3):
            by_rank = one_epoch(small_shards, mode, ranks, workers)
            got = sorted(i for batches in by_rank for b in batches for i in ids(b))
            assert got == all_ids, (mode, ranks, workers)
            # len() is what each rank yields.
            for r, batches in enumerate(by_rank):
                assert len(batches) == len(dataset(small_shards, mode, ranks, r)), (ranks, workers, r)


@pytest.mark.parametrize("mode", ["global", "blocks"])
def test_orders_follow_seed_and_epoch(small_shards, mode):
    def order(epoch, seed=5):
        ds = dataset(small_shards, mode, 1, 0, seed=seed)
        ds.set_epoch(epoch)
        return [i for b in ds for i in ids(b)]
    first = order(0)
    assert first == order(0), "the same (seed, epoch): the same order"
    assert first != order(1) and first != order(0, seed=6)
    assert sorted(first) != first, "shuffled"
    # The same order whatever the workers: the loader's round robin gives the steps in turn.
    by_rank = one_epoch(small_shards, mode, 1, 3)
    assert [i for b in by_rank[0] for i in ids(b)] == first


def test_drop_remainder_gives_every_rank_the_same_batches(small_shards):
    by_rank = one_epoch(small_shards, "global", 3, 2, drop=True)
    counts = {len(b) for b in by_rank}
    assert counts == {2000 // (64 * 3)}
    assert all(len(b["id"]) == 64 for batches in by_rank for b in batches)


@pytest.mark.parametrize("mode", ["global", "blocks"])
def test_elastic_resume_reads_every_record_once(small_shards, all_ids, mode):
    # k batches at (ranks 4, workers 2), each worker's state as StatefulDataLoader keeps it.
    ranks, workers, k = 4, 2, 3
    seen, states = [], []
    for r in range(ranks):
        readers, its = [], []
        for w in range(workers):
            ds = dataset(small_shards, mode, ranks, r, batch=32)
            with as_worker(w, workers):
                its.append(iter(ds))
            readers.append(ds)
        yielded = [0] * workers
        for step in range(k):
            w = step % workers
            seen.extend(ids(next(its[w])))
            yielded[w] += 1
        snapshot = {}
        for w, ds in enumerate(readers):
            with as_worker(w, workers):
                snapshot[f"worker_{w}"] = {"worker_id": w, "dataset_state": ds.state_dict()}
        states.append({"_snapshot": {"_worker_snapshots": snapshot}})
        assert [snapshot[f"worker_{w}"]["dataset_state"]["batches"] for w in range(workers)] == yielded
    # Every rank's state names the same global position: any rank's may be loaded.
    for new_ranks, new_workers, batch in ((3, 1, 48), (2, 3, 20)):
        rest = []
        for r in range(new_ranks):
            readers = []
            for w in range(new_workers):
                ds = dataset(small_shards, mode, new_ranks, r, batch=batch)
                ds.load_state_dict(states[(r + 1) % ranks])
                with as_worker(w, new_workers):
                    readers.append(iter(ds))
            rest.extend(i for b in loader_order(readers) for i in ids(b))
        assert sorted(seen + rest) == all_ids, (new_ranks, new_workers)


def test_states_that_cannot_continue_are_refused(small_shards, tmp_path, tfshard_bin):
    ds = dataset(small_shards, "global", 1, 0)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    with pytest.raises(ValueError, match="seed"):
        dataset(small_shards, "global", 1, 0, seed=9).load_state_dict(state)
    with pytest.raises(ValueError, match="shuffle"):
        dataset(small_shards, "blocks", 1, 0).load_state_dict(state)
    with pytest.raises(ValueError, match="other shards"):
        fewer = tfshard.Dataset(sorted(small_shards.glob("*.tfrecord"))[:2], shuffle="global", seed=5, columns=["id"])
        fewer.load_state_dict(state)
    # A state of the order before this one's (version 2: a Feistel network over a
    # power of four) would continue another order.
    with pytest.raises(ValueError, match="earlier tfshard"):
        dataset(small_shards, "global", 1, 0).load_state_dict({**state, "version": 2})
    buffered = tfshard.Dataset(small_shards, batch_size=64, seed=5)
    next(iter(buffered))
    with pytest.raises(ValueError, match="shuffle"):
        dataset(small_shards, "global", 1, 0).load_state_dict(buffered.state_dict())
    # The buffer shuffle resumes only the same configuration.
    with pytest.raises(ValueError, match="batch_size"):
        tfshard.Dataset(small_shards, batch_size=32, seed=5).load_state_dict(buffered.state_dict())
    # The same rank continues where the state was.
    again = dataset(small_shards, "global", 1, 0)
    again.load_state_dict(state)
    rest = [i for b in again for i in ids(b)]
    whole = [i for b in dataset(small_shards, "global", 1, 0) for i in ids(b)]
    assert rest == whole[64:]
