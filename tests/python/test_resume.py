"""Where a resumed epoch continues (tfshard._resume), as pure functions: no torch, no
shards. Every way to load a state continues exactly or refuses."""

import random

import pytest

from tfshard import _resume


def state(worker, workers, batches, *, epoch=0, start=0, batch=32, ranks=2, shuffle="global"):
    """A Dataset state as a DataLoader worker (or the main process: 0 of 1) takes it."""
    return {"version": 3, "tfshard": True, "shuffle": shuffle, "seed": 1, "epoch": epoch, "records": 5000,
            "block": None, "window": None, "start": start, "batch_size": batch, "num_shards": ranks,
            "drop_remainder": False, "worker": worker, "workers": workers, "batches": batches}


MINE = {"shuffle": "global", "seed": 1, "records": 5000, "block": None, "window": None}


def loader_state(per_worker, **kw):
    """A StatefulDataLoader's whole state: each worker's Dataset state nested in it."""
    workers = len(per_worker)
    return {"_snapshot": {"_main_snapshot": {"_num_workers": workers},
                          "_worker_snapshots": {f"worker_{w}": {"dataset_state": state(w, workers, b, **kw)}
                                                for w, b in enumerate(per_worker)}}}


def test_a_loaders_whole_state_gives_the_global_position_under_any_configuration():
    loaded = _resume.load_ordered(_resume.states_in(loader_state([10, 10])), MINE)
    assert loaded.complete and loaded.per_worker == {0: 10, 1: 10}
    # 20 steps of 32 x 2 ranks: 1,280 positions done.
    for batch, ranks, workers in ((48, 3, 2), (32, 2, 3), (10, 1, 1)):
        for w in range(workers):
            assert _resume.ordered_start(loaded, batch, ranks, 5000, w, workers) == (1280, 0)
    # The configuration that took it: each worker its own steps.
    assert _resume.ordered_start(loaded, 32, 2, 5000, 1, 2) == (0, 10)


def test_one_workers_state_alone_continues_only_the_run_that_took_it():
    """Regression: a StatefulDataLoader resumed at another world size or batch size
    hands each worker its own state; its steps were taken as the run's steps, and 1,600
    of 5,000 records were never read, without an error."""
    one = _resume.load_ordered(_resume.states_in(state(0, 2, 10)), MINE)
    assert not one.complete
    assert _resume.ordered_start(one, 32, 2, 5000, 0, 2) == (0, 10)
    for batch, ranks, workers, worker in ((48, 3, 2, 0), (32, 3, 2, 0), (48, 2, 2, 0), (32, 2, 2, 1)):
        with pytest.raises(ValueError, match="one worker's state cannot say where the epoch stands"):
            _resume.ordered_start(one, batch, ranks, 5000, worker, workers)


def test_a_whole_state_loaded_first_stands_over_each_workers_own():
    """dataset.load_state_dict(loader_state), then loader.load_state_dict(loader_state):
    the loader hands each worker its own state, which the whole one already covers."""
    whole = _resume.load_ordered(_resume.states_in(loader_state([10, 9])), MINE)
    own = _resume.load_ordered(_resume.states_in(state(1, 2, 9)), MINE)
    assert _resume.keeps(whole, own)
    other_run = _resume.load_ordered(_resume.states_in(state(1, 2, 9, start=64)), MINE)
    assert not _resume.keeps(whole, other_run)
    assert not _resume.keeps(own, whole)


@pytest.mark.parametrize("seed", range(40))
def test_a_loader_stopped_anywhere_resumes_at_the_steps_it_yielded(seed):
    """A loader yields its workers' steps in turn (w, w + W, ...): after any number of
    steps, its workers' states give the global position of the steps yielded, and a
    run under any configuration continues there."""
    rng = random.Random(seed)
    workers, batch, ranks = rng.randint(1, 4), rng.randint(1, 64), rng.randint(1, 4)
    span = batch * ranks
    n = rng.randint(0, 3000)
    steps = -(-n // span)
    yielded = rng.randint(0, steps)
    per_worker = [len(range(w, yielded, workers)) for w in range(workers)]
    loaded = _resume.load_ordered(_resume.states_in(loader_state(per_worker, batch=batch, ranks=ranks)),
                                  dict(MINE, records=5000))
    assert _resume.position(loaded, n) == min(yielded * span, n)


def test_worker_counts_no_in_order_loader_leaves_are_refused_under_another_configuration():
    """A loader with in_order=False can leave its workers' counts out of turn ({0: 5,
    1: 3}: steps 0, 2, 4, 6, 8 and 1, 3, 5, not the first eight): no position says where
    the epoch stands, so another configuration is refused; the same one continues each
    worker's own steps exactly."""
    loaded = _resume.load_ordered(_resume.states_in(loader_state([5, 3])), MINE)
    with pytest.raises(ValueError, match="not the first steps of the epoch"):
        _resume.ordered_start(loaded, 48, 3, 5000, 0, 2)
    assert _resume.ordered_start(loaded, 32, 2, 5000, 0, 2) == (0, 5)
    assert _resume.ordered_start(loaded, 32, 2, 5000, 1, 2) == (0, 3)
    # Two of three workers' states (hand-merged): the others' are unknown.
    two = _resume.load_ordered(_resume.states_in(state(0, 3, 2)) + _resume.states_in(state(1, 3, 2)), MINE)
    with pytest.raises(ValueError, match="holds workers \\[0, 1\\] of 3"):
        _resume.ordered_start(two, 48, 3, 5000, 0, 2)


def test_buffer_states_resume_the_same_configuration_only():
    config = {"batch_size": 8, "seed": 0, "shuffle_buffer": 100, "drop_remainder": False, "num_shards": 1,
              "shard_index": 0, "records": 50, "cycle_length": None, "cache": None, "even_batches": True}
    taken = dict(config, version=1, epoch=0, batches=3, worker=1, workers=2)
    loaded = _resume.load_buffer([taken], config, "buffer")
    assert _resume.buffer_skip(loaded, 1, 2) == 3
    with pytest.raises(ValueError, match=r"workers \[1\] of 2 alone, and this is worker 0"):
        _resume.buffer_skip(loaded, 0, 2)
    with pytest.raises(ValueError, match="2 DataLoader workers, this loader has 3"):
        _resume.buffer_skip(loaded, 1, 3)
    with pytest.raises(ValueError, match="batch_size=8, this dataset has 16"):
        _resume.load_buffer([taken], dict(config, batch_size=16), "buffer")
    # A state from before ranks were kept even was taken without even_batches.
    old = {k: v for k, v in taken.items() if k != "even_batches"}
    with pytest.raises(ValueError, match="even_batches=False, this dataset has True"):
        _resume.load_buffer([old], config, "buffer")
    assert _resume.load_buffer([old], dict(config, even_batches=False), "buffer").per_worker == {1: 3}
