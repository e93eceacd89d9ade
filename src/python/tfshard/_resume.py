"""Where a resumed epoch continues: pure functions over the states ``Dataset.state_dict()``
returned (one reader's, each DataLoader worker's, or a torchdata ``StatefulDataLoader``'s
whole state holding its workers'), testable without torch or shards.

Every way to load a state is exact or refuses: a reader continues at the exact global
position the state says (``shuffle="global"`` and ``"blocks"``, under any ranks, workers
or batch size), or continues its own steps where the configuration is the one that took
the state, or raises ``ValueError`` naming what differs; never a silent skip or repeat.

A DataLoader worker's state holds only that worker's count of batches. Its steps are
``w, w + W, ...``, and the loader yields them in turn, so the whole loader's states
together give the steps done (their sum); one worker's alone does not. A
``StatefulDataLoader`` hands each new worker its old worker's state: that continues
exactly only under the same workers, batch size and ranks (each worker its own steps);
under another, the whole state must reach the Dataset first
(``dataset.load_state_dict(loader_state)``), which then keeps the global position it
found over the single worker's state the loader hands it.
"""

from typing import Any, Dict, List, NamedTuple, Optional, Tuple


class Loaded(NamedTuple):
    """A state loaded for the next pass, as read from the states found."""

    epoch: int
    #: The global position the run that took it started its pass from (global and
    #: blocks; 0 with the buffer shuffle).
    start: int
    #: Batches each worker of that run had yielded, by worker index.
    per_worker: Dict[int, int]
    #: That run's DataLoader workers (1: read in the main process).
    workers: int
    batch_size: int
    num_shards: int
    #: Whether every worker's count is here (a whole loader's state, or a main process's
    #: state): the steps done are then known.
    complete: bool


def states_in(state: Any) -> List[Dict[str, Any]]:
    """The Dataset states in ``state``: itself, or those nested in a StatefulDataLoader's
    state (one per worker)."""
    if isinstance(state, dict):
        if state.get("version") in (1, 2, 3) and "epoch" in state and "batches" in state:
            return [state]
        found: List[Dict[str, Any]] = []
        for value in state.values():
            found.extend(states_in(value))
        return found
    if isinstance(state, (list, tuple)):
        return [s for v in state for s in states_in(v)]
    return []


def _counts(found: List[Dict[str, Any]]) -> Tuple[Dict[int, int], int, bool]:
    """Each worker's batches, the workers, and whether every worker's count is there."""
    workers = int(found[0].get("workers", 1))
    per_worker = {int(f.get("worker", 0)): int(f["batches"]) for f in found}
    if len(per_worker) != len(found):
        raise ValueError("the state holds one DataLoader worker's state twice")
    if any(not 0 <= w < workers for w in per_worker):
        raise ValueError(f"the state names workers {sorted(per_worker)} of {workers}")
    return per_worker, workers, len(per_worker) == workers


def load_ordered(found: List[Dict[str, Any]], mine: Dict[str, Any]) -> Loaded:
    """Checks states of a global or blocks epoch against this dataset (``mine``: its
    ``shuffle``, ``seed``, ``records``, ``block`` and ``window``) and reads them."""
    first = found[0]
    if first.get("version") == 2:
        raise ValueError(
            "the state was taken by an earlier tfshard (state version 2), whose shuffled order "
            "differs: it would not continue the same epoch; start its epoch again "
            f"(set_epoch({first.get('epoch')})) or resume with the tfshard that took it"
        )
    if first.get("version") != 3:
        raise ValueError(
            f'the state was taken with shuffle="buffer", this dataset has shuffle="{mine["shuffle"]}"'
        )
    run = ("epoch", "start", "batch_size", "num_shards", "workers")
    for f in found:
        for key, value in mine.items():
            if f.get(key) != value:
                what = "other shards (a changed manifest)" if key == "records" else f"{key}={f.get(key)!r}"
                raise ValueError(
                    f"the state was taken with {what}, this dataset has {key}={value!r}: it would not "
                    "continue the same epoch"
                )
        if any(f.get(k) != first.get(k) for k in run):
            raise ValueError("the states found are of different runs")
    per_worker, workers, complete = _counts(found)
    return Loaded(int(first["epoch"]), int(first["start"]), per_worker, workers,
                  int(first["batch_size"]), int(first["num_shards"]), complete)


def position(loaded: Loaded, records: int) -> int:
    """The global position a complete state's epoch stands at: the steps its loader
    yielded, each ``batch_size * num_shards`` positions.

    Raises ``ValueError`` where the workers' counts are not those of a loader that yields
    their steps in turn (worker ``w`` yields steps ``w, w + W, ...``: after ``S`` steps
    it has yielded ``ceil((S - w) / W)``), as a loader with ``in_order=False`` may leave
    them: the steps done are then no run of steps from the start, and no position says
    where the epoch stands."""
    steps = sum(loaded.per_worker.values())
    workers = loaded.workers
    if any(b != -(-(steps - w) // workers) for w, b in loaded.per_worker.items()):
        counts = [loaded.per_worker[w] for w in sorted(loaded.per_worker)]
        raise ValueError(
            f"the DataLoader workers' states say they yielded {counts} batches, which a loader that "
            "yields its workers' batches in turn (in_order=True, the default) does not leave: the "
            "steps done are not the first steps of the epoch; resume with the same workers, "
            "batch_size and num_shards (each worker continues its own steps)"
        )
    return min(loaded.start + steps * loaded.batch_size * loaded.num_shards, records)


def ordered_start(loaded: Loaded, batch_size: int, num_shards: int, records: int,
                  worker: int, workers: int) -> Tuple[int, int]:
    """Where DataLoader worker ``worker`` of ``workers`` (0 of 1: the main process) of a
    reader with ``batch_size`` and ``num_shards`` continues: (the global position its
    steps count from, its batches to skip there)."""
    same = (loaded.batch_size, loaded.num_shards, loaded.workers) == (batch_size, num_shards, workers)
    if same and (loaded.complete or worker in loaded.per_worker):
        # The run that took it, again: each worker continues its own steps.
        return loaded.start, loaded.per_worker.get(worker, 0)
    if loaded.complete:
        return position(loaded, records), 0
    if len(loaded.per_worker) != 1:
        raise ValueError(
            f"the state holds workers {sorted(loaded.per_worker)} of {loaded.workers}: load the whole "
            "StatefulDataLoader state, or one taken in the main process"
        )
    (w,) = loaded.per_worker
    differs = []
    if loaded.workers != workers or w != worker:
        differs.append(f"worker {worker} of {workers}")
    if loaded.batch_size != batch_size:
        differs.append(f"batch_size={batch_size} (the state's {loaded.batch_size})")
    if loaded.num_shards != num_shards:
        differs.append(f"num_shards={num_shards} (the state's {loaded.num_shards})")
    raise ValueError(
        f"the state is DataLoader worker {w} of {loaded.workers}'s alone, and this reader has "
        f"{', '.join(differs)}: one worker's state cannot say where the epoch stands (the other "
        "workers' steps are not in it). Load the StatefulDataLoader's whole state into the Dataset "
        "(dataset.load_state_dict(state)) before making the loader, or resume with the same "
        "workers, batch_size and num_shards"
    )


def keeps(current: Optional[Loaded], new: Loaded) -> bool:
    """Whether a complete state already loaded (``current``) stands over ``new``, one
    worker's state of the same run: a StatefulDataLoader hands each worker its own after
    the whole state reached the Dataset."""
    return (
        current is not None
        and current.complete
        and not new.complete
        and (current.epoch, current.start, current.workers, current.batch_size, current.num_shards)
        == (new.epoch, new.start, new.workers, new.batch_size, new.num_shards)
        and all(current.per_worker.get(w) == b for w, b in new.per_worker.items())
    )


#: What a buffer-shuffle state must match: its batches are those of this configuration.
BUFFER_KEYS = ("batch_size", "seed", "shuffle_buffer", "drop_remainder", "num_shards", "shard_index",
               "records", "cycle_length", "cache", "even_batches")


def load_buffer(found: List[Dict[str, Any]], config: Dict[str, Any], shuffle: str) -> Loaded:
    """Checks buffer-shuffle states against this dataset's ``config`` and reads them."""
    first = found[0]
    if first.get("version") != 1:
        raise ValueError(f'the state was taken with shuffle="{first.get("shuffle")}", this dataset has shuffle="{shuffle}"')
    for f in found:
        for key in BUFFER_KEYS:
            # (A state from before even_batches was taken without it: uneven ranks.)
            theirs = f.get(key, False if key == "even_batches" else None)
            if theirs != config[key]:
                raise ValueError(
                    f"the state was taken with {key}={theirs!r}, this dataset has {config[key]!r}: "
                    "it would not give the same batches (only shuffle=\"global\" or \"blocks\" resume "
                    "under another configuration)"
                )
        if f.get("epoch") != first.get("epoch") or f.get("workers", 1) != first.get("workers", 1):
            raise ValueError("the states found are of different runs")
    per_worker, workers, complete = _counts(found)
    return Loaded(int(first["epoch"]), 0, per_worker, workers, int(config["batch_size"]),
                  int(config["num_shards"]), complete)


def buffer_skip(loaded: Loaded, worker: int, workers: int) -> int:
    """The batches DataLoader worker ``worker`` of ``workers`` skips (the buffer shuffle
    resumes only the configuration that took the state)."""
    if loaded.workers != workers:
        raise ValueError(
            f"the state was taken with {loaded.workers} DataLoader workers, this loader has "
            f"{workers}: with the buffer shuffle, resume under the same configuration (or use "
            'shuffle="global" or "blocks")'
        )
    if not loaded.complete and worker not in loaded.per_worker:
        raise ValueError(
            f"the state holds DataLoader workers {sorted(loaded.per_worker)} of {workers} alone, and this "
            f"is worker {worker}: load the whole StatefulDataLoader state, or one taken in the main process"
        )
    return loaded.per_worker.get(worker, 0)
