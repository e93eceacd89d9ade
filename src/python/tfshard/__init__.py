"""tfshard: Parquet, Delta and Iceberg tables, Arrow data, image folders and TFRecords into
size-targeted, CRC-framed TFRecord shards; and a fast reader of them for any training loop.

The commands are the ``tfshard`` command line's, returning data instead of printing::

    import tfshard
    summary = tfshard.convert("events.parquet", "out/", target_shard_size="128MiB")
    report = tfshard.verify("out/", deep=True)
    assert report["ok"]

    for batch in tfshard.Dataset("out/", batch_size=256, seed=1):
        x, y = batch["x"], batch["y"]        # NumPy arrays, [256, ...]

Options are the command's long flags in snake_case (``--target-shard-size`` is
``target_shard_size=``), with the same defaults and rules; the results have the keys of
the command's ``--json``. Usage errors raise ``ValueError`` (an unknown option,
``TypeError``, as for any Python function); bad data raises :class:`tfshard.Error`, or the
subclass of its family (:class:`CorruptInputError`, :class:`SchemaMismatchError`,
:class:`StoreError`, :class:`Interrupted`). Nothing is printed unless asked
(``progress=True`` draws the command line's progress bar on stderr).
"""

from __future__ import annotations

import operator
import os
import sys
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ._tfshard import (
    CorruptInputError,
    Error,
    Interrupted,
    SchemaMismatchError,
    StoreError,
    RecordsCore as _RecordsCore,
    Shards as _Shards,
    __version__,
)
from . import _tfshard
from . import _resume

__all__ = [
    "CorruptInputError",
    "Dataset",
    "Error",
    "Interrupted",
    "Records",
    "SchemaMismatchError",
    "StoreError",
    "compact",
    "convert",
    "finalize",
    "inspect",
    "schema",
    "stats",
    "verify",
    "__version__",
]

_SOURCE_FORMATS = ("parquet", "delta", "iceberg", "tfrecord", "images")

PathLike = Union[str, "os.PathLike[str]"]
"""A local path or a store URL (``s3://``, ``gs://``, ``az://``, ``file://``)."""


def _paths(paths: Any) -> List[str]:
    """A path, a URL or a sequence of them, as strings."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        return [os.fsdecode(paths)]
    out = [os.fsdecode(p) for p in paths]
    if not out:
        raise ValueError("no path given")
    return out


def _given(function: Any, values: Dict[str, Any]) -> Dict[str, Any]:
    """The keyword options of ``function`` whose values differ from its defaults (as
    flags left out of a command line), paths as strings."""
    defaults = function.__kwdefaults__
    given = {}
    for name, value in values.items():
        if name in defaults and value is not defaults[name] and value != defaults[name]:
            given[name] = os.fsdecode(value) if isinstance(value, os.PathLike) else value
    return given


def convert(
    source: Any,
    output: PathLike,
    *,
    format: Optional[str] = None,
    target_shard_size: Union[int, str] = "256MiB",
    max_records_per_shard: Optional[int] = None,
    min_shards: Optional[int] = None,
    prefix: str = "data",
    tfds: Optional[str] = None,
    compression: str = "none",
    overwrite: bool = False,
    resume: bool = False,
    append: bool = False,
    retain: Optional[int] = None,
    index: bool = False,
    stats: bool = False,
    shuffle: bool = False,
    seed: int = 0,
    shuffle_memory: Union[int, str] = "1GiB",
    tmp_dir: Optional[PathLike] = None,
    split: Union[Mapping[str, float], str, None] = None,
    split_key: Optional[str] = None,
    columns: Optional[Sequence[str]] = None,
    exclude: Optional[Sequence[str]] = None,
    rename: Optional[Mapping[str, str]] = None,
    record_type: Optional[str] = None,
    num_workers: Optional[int] = None,
    worker_index: Optional[int] = None,
    parquet_decoder: str = "auto",
    partition_base: Optional[PathLike] = None,
    partitioning: str = "auto",
    version: Optional[int] = None,
    snapshot_id: Optional[int] = None,
    timestamp: Optional[str] = None,
    partition_filter: Optional[Mapping[str, str]] = None,
    labels: Union[str, "os.PathLike[str]"] = "dirname",
    extensions: Optional[Sequence[str]] = None,
    on_error: str = "fail",
    input_compression: str = "auto",
    threads: Optional[int] = None,
    io_concurrency: int = 16,
    io_timeout: Union[str, float] = "5m",
    progress: Union[bool, str] = False,
) -> Dict[str, Any]:
    """Converts ``source`` into TFRecord shards in ``output`` (a folder or a store URL) and
    returns the run's summary (the keys of ``tfshard convert ... --json``).

    ``source`` is what the command line takes: a path, a URL or a list of them, read as
    ``format`` (``"parquet"``, the default; ``"delta"``, ``"iceberg"``, ``"tfrecord"``,
    ``"images"``); or any object with ``__arrow_c_stream__`` (a pyarrow Table or
    RecordBatchReader, a polars DataFrame, a DuckDB relation; pandas through
    ``pyarrow.Table.from_pandas``), converted in stream order with the Parquet mapping.

    The options are ``tfshard convert FORMAT``'s flags, with their defaults; an option of
    another format (``version=`` for Parquet) is a ``ValueError``. Sizes are bytes or
    strings with a unit (``"128MiB"``); ``split`` maps names to fractions
    (``{"train": 0.8, "test": 0.2}``), ``rename`` old names to new, ``partition_filter``
    keys to values; ``record_type`` is ``"example"`` or ``"sequence-example"`` (and for
    TFRecords ``"auto"``, their default, or ``"bytes"``).

    Raises ``ValueError`` for options that make no sense, :class:`tfshard.Error` for bad
    data (nothing of the run is left in ``output``), ``KeyboardInterrupt`` when
    interrupted (its temporaries removed).
    """
    options = _given(convert, dict(locals()))
    options.pop("format", None)
    stream = None
    inputs: List[str] = []
    if hasattr(source, "__arrow_c_stream__") or type(source).__name__ == "RecordBatchReader":
        if format not in (None, "arrow"):
            raise ValueError(f"format={format!r} names a kind of file; an Arrow stream is converted as it is")
        stream, format = source, "arrow"
    else:
        format = format or "parquet"
        if format not in _SOURCE_FORMATS:
            raise ValueError(f"format must be one of {', '.join(_SOURCE_FORMATS)}, not {format!r}")
        if isinstance(source, (str, bytes, os.PathLike)) or isinstance(source, (list, tuple)):
            inputs = _paths(source)
        else:
            raise ValueError(
                f"source must be a path, a URL, a list of them, or an object with __arrow_c_stream__; "
                f"not a {type(source).__name__}"
            )
    result: Dict[str, Any] = _tfshard.convert(format, inputs, os.fsdecode(output), stream, options)
    return result


def verify(
    paths: Union[PathLike, Sequence[PathLike], None] = None,
    *,
    manifest: Optional[PathLike] = None,
    deep: bool = False,
    baseline: Optional[PathLike] = None,
    schema: Optional[PathLike] = None,
    thresholds: Optional[Mapping[str, float]] = None,
    compression: str = "auto",
    record_type: str = "auto",
    threads: Optional[int] = None,
    io_concurrency: int = 16,
    io_timeout: Union[str, float] = "5m",
    progress: Union[bool, str] = False,
) -> Dict[str, Any]:
    """Checks every record's framing and CRCs, and the manifest's counts, sizes and
    checksums (``deep=True``: every record parses and matches the schema); ``paths`` may
    be left out when ``manifest`` names the set. Returns the
    report (the keys of ``tfshard verify --json``): ``ok`` is False, with the
    ``problems`` (each with its ``kind``), when something is wrong. With ``baseline``
    (another set, TFRecord files, or a statistics file, ours or TFDV's), the set's
    statistics are compared with the baseline's: the report's ``anomalies`` (``ok`` False
    when any), each ``{"feature", "kind", "measured", "threshold", "description"}``;
    ``thresholds`` maps features to their threshold (else 0.1, or the schema's). With
    ``schema`` (a TFDV ``Schema`` in text format), the statistics are checked against it
    too. Raises ``ValueError`` for a baseline or schema that cannot be read,
    :class:`tfshard.Error` only when nothing can be read."""
    options = _given(verify, dict(locals()))
    if paths is None and manifest is None:
        raise ValueError("give the shards to verify, or a manifest")
    if thresholds is not None:
        options["thresholds"] = {str(k): float(v) for k, v in thresholds.items()}
    report: Dict[str, Any] = _tfshard.verify([] if paths is None else _paths(paths), options)
    return report


def stats(
    paths: Union[PathLike, Sequence[PathLike]],
    *,
    baseline: Optional[PathLike] = None,
    compression: str = "auto",
    record_type: str = "auto",
    threads: Optional[int] = None,
    io_concurrency: int = 16,
    io_timeout: Union[str, float] = "5m",
    progress: Union[bool, str] = False,
) -> Dict[str, Any]:
    """The statistics of a set (those its conversion kept with ``stats=True``) or of any
    TFRecord files (computed): ``{"records", "features": [...]}``, the keys of ``tfshard
    stats --json``; with ``baseline``, the baseline's under ``"baseline"`` too."""
    options = _given(stats, dict(locals()))
    result: Dict[str, Any] = _tfshard.stats(_paths(paths), options)
    return result


def schema(
    paths: Union[PathLike, Sequence[PathLike]],
    *,
    format: str = "json",
    compression: str = "auto",
    record_type: str = "auto",
    threads: Optional[int] = None,
    io_concurrency: int = 16,
    io_timeout: Union[str, float] = "5m",
) -> Any:
    """The feature spec of shards (their manifest's, or inferred from every record): a
    list of features as the manifest lists them, or with ``format="python"`` the
    ``tf.io.parse_example`` feature-spec dict as Python source (a string)."""
    options = _given(schema, dict(locals()))
    return _tfshard.schema(_paths(paths), options)


def inspect(
    path: PathLike,
    *,
    limit: Optional[int] = None,
    compression: str = "auto",
    record_type: str = "auto",
    io_concurrency: int = 16,
    io_timeout: Union[str, float] = "5m",
) -> Iterator[Dict[str, Any]]:
    """The records of a shard (or of a folder's or manifest's shards), decoded, one dict
    per record as ``tfshard inspect`` prints them (bytes as text, or as base64 under
    ``bytes_b64`` where they are not UTF-8), yielded as they are read: a few dozen records
    at most are held ahead of the caller. ``limit``: at most this many."""
    options = _given(inspect, dict(locals()))
    records: Iterator[Dict[str, Any]] = _tfshard.Inspect(os.fsdecode(path), options)
    return records


def finalize(
    output: PathLike,
    *,
    prefix: Optional[str] = None,
    overwrite: bool = False,
    tfds: Optional[str] = None,
    io_concurrency: int = 16,
    io_timeout: Union[str, float] = "5m",
) -> Dict[str, Any]:
    """Publishes the parts that ``convert(..., num_workers=N, worker_index=i)`` runs wrote
    to ``output`` as one shard set with one manifest; returns the keys of ``tfshard
    finalize --json``."""
    options = _given(finalize, dict(locals()))
    report: Dict[str, Any] = _tfshard.finalize(os.fsdecode(output), options)
    return report


def compact(
    output: PathLike,
    *,
    prefix: str = "data",
    target_shard_size: Union[int, str, None] = None,
    retain: Optional[int] = None,
    io_concurrency: int = 16,
    io_timeout: Union[str, float] = "5m",
) -> Dict[str, Any]:
    """Rewrites the small generations that ``convert(..., append=True)`` left in
    ``output`` as one generation of full-size shards (the same records in the same
    order); returns the keys of ``tfshard compact --json``."""
    options = _given(compact, dict(locals()))
    summary: Dict[str, Any] = _tfshard.compact(os.fsdecode(output), options)
    return summary


def _mix(seed: int, epoch: int) -> int:
    """The shuffle seed of an epoch: the seed itself for epoch 0 (the order of
    ``tfshard bench --seed S``'s first epoch), then a SplitMix64 step of (seed, epoch)."""
    if epoch == 0:
        return seed
    z = (seed + epoch * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def _data_loader_worker() -> Tuple[int, int]:
    """(this worker, workers) inside a PyTorch DataLoader worker, else (0, 1). torch is
    never imported here: a process that runs DataLoader workers has imported it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0, 1
    info = torch.utils.data.get_worker_info()
    if info is None:
        return 0, 1
    return info.id, info.num_workers


_TORCH_CLASSES: Dict[int, type] = {}


def _class_for(cls: type) -> type:
    """`cls`, or where torch is installed a subclass of it and of torch's
    IterableDataset, which a DataLoader needs to see to iterate it (rather than index
    it). torch is imported here, when a Dataset is made, never by ``import tfshard``."""
    if cls is not Dataset:
        return cls
    torch = sys.modules.get("torch")
    if torch is None:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return cls
        import torch
    if torch is None:
        return cls
    base = torch.utils.data.IterableDataset
    made = _TORCH_CLASSES.get(id(base))
    if made is None:
        made = type("Dataset", (Dataset, base), {"__module__": __name__, "__qualname__": "Dataset"})
        _TORCH_CLASSES[id(base)] = made
    return made


def _rebuild(state: Dict[str, Any]) -> "Dataset":
    """Unpickles a Dataset (see Dataset.__reduce__)."""
    ds = Dataset.__new__(Dataset)
    ds.__setstate__(state)
    return ds


class Dataset:
    """TFRecord shards as an iterable of batches, read by tfshard's pipeline (interleave,
    shuffle, batch, parallel parse, prefetch; the GIL released while it reads, parses and
    waits).

    Each batch is a dict from feature to NumPy arrays: fixed shapes dense
    (``[batch, *shape]``), variable lengths as ``(values, row_splits)`` (the components of
    a ``tf.RaggedTensor``), feature lists of SequenceExamples as
    ``(values, row_splits, step_splits)``, bytes as object arrays of ``bytes``. With
    ``format="arrow"``, a ``pyarrow.RecordBatch`` instead (numbers not copied).

    ``paths``: shard files, folders or manifests (local or store URLs). ``shuffle_buffer``
    (records; 0 or 1: no shuffle, files in order), ``seed``, ``drop_remainder``,
    ``columns`` (a subset of the features), ``cache`` (``True``: what the first epoch
    parsed is kept in memory for the next ones; a path: in that local file, also for later
    runs), ``cycle_length`` (files read at once; default: up to 8), ``threads``,
    ``compression`` as ``tfshard bench`` takes them. ``generations`` (a set that grew
    with ``--append``): only the live shards those generations wrote, for training on the
    newest data; a generation's pinned manifest (``data.manifest-g00003.json``) as
    ``paths`` reads the set as it was then.

    ``num_shards``/``shard_index`` give this rank a contiguous share of the records (as
    even as records allow); inside a PyTorch DataLoader worker the rank's share is split
    again between the workers, in whole batches, so every record is read exactly once
    per epoch over all ranks and workers. ``len()`` is the number of batches this rank
    yields per epoch (from the manifest's counts). Each pass is an epoch; its shuffle
    order depends on (seed, epoch), the epoch advancing with each complete pass or set by
    :meth:`set_epoch`.

    ``shuffle``: ``"buffer"`` (the default: the pipeline's buffer of ``shuffle_buffer``
    records), ``"global"`` (a keyed permutation of all records, no buffer: the epoch's
    positions go to the ranks in whole batches, and inside a rank to DataLoader worker w
    the steps w, w + W, ...) or ``"blocks"`` (the same over blocks of ``block_size``
    records, default about 4 MiB of them, then shuffled within each ``window`` of
    blocks). :meth:`state_dict` / :meth:`load_state_dict` (torchdata's names; also
    :meth:`state` and ``Dataset(..., state=...)``) resume in the middle of an epoch: with
    the buffer shuffle the same configuration and batches; with ``"global"`` and
    ``"blocks"`` the epoch's global position, under any number of ranks, workers or
    batch size (elastic).

    ``"global"`` and ``"blocks"`` read records by offset: from the shards' ``.idx`` files
    (``convert --index``), else from a table made by one walk of their frames, 4 bytes a
    record (``table_bytes``), bounded by ``table_bound`` (default 1 GiB). Over the bound
    ``"global"`` is refused, saying what to do; ``"blocks"`` keeps one offset a block
    instead and reads each window of blocks at once, walking the frames of its blocks.

    Ranks stay even: every rank yields the same number of batches each epoch (what DDP's
    all-reduce needs; ``DistributedSampler`` and Accelerate do the same). The last step's
    records are spread so that every rank gets some; only where fewer records than ranks
    remain does a rank without one read a repeat of one of the epoch's records (at most
    ``num_shards - 1`` an epoch, counted by ``len()``). ``even_batches=False`` reads every
    record exactly once, and ranks' counts may then differ by one batch (tfshard before
    0.2 did this by default). With ``drop_remainder=True`` the incomplete last step is
    dropped instead (with the buffer shuffle: each rank's share cut to whole batches of the
    smallest share).

    Where torch is installed, a Dataset is also a ``torch.utils.data.IterableDataset``
    (torch is imported when the Dataset is made, never by ``import tfshard``): hand it to
    a ``DataLoader`` with ``batch_size=None``.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> "Dataset":
        return super().__new__(_class_for(cls))

    def __reduce__(self) -> Any:
        return (_rebuild, (self.__getstate__(),))

    def __init__(
        self,
        paths: Any,
        batch_size: int = 64,
        *,
        shuffle: str = "buffer",
        shuffle_buffer: int = 10_000,
        block_size: Optional[int] = None,
        window: int = 8,
        seed: int = 0,
        drop_remainder: bool = False,
        columns: Optional[Sequence[str]] = None,
        cache: Union[None, bool, str, os.PathLike] = None,
        num_shards: int = 1,
        shard_index: int = 0,
        format: str = "numpy",
        cycle_length: Optional[int] = None,
        threads: Optional[int] = None,
        compression: str = "auto",
        state: Optional[Dict[str, Any]] = None,
        generations: Optional[Sequence[int]] = None,
        table_bound: Optional[int] = None,
        even_batches: bool = True,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, not {batch_size!r}")
        if shuffle not in ("buffer", "global", "blocks"):
            raise ValueError(f'shuffle must be "buffer", "global" or "blocks", not {shuffle!r}')
        if shuffle_buffer < 0 or seed < 0:
            raise ValueError("shuffle_buffer and seed must not be negative")
        if block_size is not None and (not isinstance(block_size, int) or block_size < 1):
            raise ValueError(f"block_size must be a positive number of records, not {block_size!r}")
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive number of blocks, not {window!r}")
        if table_bound is not None and (not isinstance(table_bound, int) or table_bound < 0):
            raise ValueError(f"table_bound must be a number of bytes, not {table_bound!r}")
        if num_shards < 1 or not 0 <= shard_index < num_shards:
            raise ValueError(f"shard_index must be in [0, num_shards), got {shard_index} of {num_shards}")
        if format not in ("numpy", "arrow"):
            raise ValueError(f'format must be "numpy" or "arrow", not {format!r}')
        if shuffle != "buffer" and (format != "numpy" or cache not in (None, False)):
            raise ValueError(f'shuffle="{shuffle}" reads records by index into NumPy batches: format="arrow" and cache are for shuffle="buffer"')
        if cache is True:
            cache = "memory"
        elif cache is False:
            cache = None
        elif cache is not None:
            cache = os.fsdecode(cache)
        self._args = (
            _paths(paths),
            None if columns is None else list(columns),
            compression,
            threads,
            None if generations is None else [int(g) for g in generations],
        )
        self._shards = _Shards(*self._args)
        self._records_core: Any = None
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.shuffle_buffer = shuffle_buffer
        self.block_size = block_size
        self.window = window
        self.table_bound = table_bound
        self.seed = seed
        self.drop_remainder = drop_remainder
        self.even_batches = bool(even_batches)
        self.num_shards = num_shards
        self.shard_index = shard_index
        self.format = format
        self.cycle_length = cycle_length
        self.threads = threads
        self._cache = cache
        self._epoch = 0
        # Where this reader is: the epoch's global position it started from (global and
        # blocks), the batches it yielded since, and a state loaded for the next pass.
        self._start = 0
        self._position = 0
        self._loaded: Optional[_resume.Loaded] = None
        if state is not None:
            self.load_state_dict(state)

    @property
    def files(self) -> List[str]:
        """The shard files, in reading order."""
        return self._shards.files

    @property
    def spec(self) -> List[Dict[str, Any]]:
        """The features the batches hold, as :func:`schema` gives them."""
        spec: List[Dict[str, Any]] = self._shards.spec
        return spec

    @property
    def epoch(self) -> int:
        """The epoch the next pass reads."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next pass reads (its shuffle order), as
        ``DistributedSampler.set_epoch``; forgets a resumed position."""
        if epoch < 0:
            raise ValueError("epoch must not be negative")
        self._epoch = epoch
        self._start = self._position = 0
        self._loaded = None

    def _records(self) -> int:
        return sum(self._shards.counts())

    def _core(self) -> Any:
        """The shards by index (global and blocks), opened on first use."""
        if self._records_core is None:
            paths, columns, compression, _, generations = self._args
            block = (self.block_size or 0) if self.shuffle == "blocks" else None
            self._records_core = _RecordsCore(
                paths, columns, False, compression, generations, self.table_bound, block
            )
        return self._records_core

    @property
    def table_bytes(self) -> int:
        """Bytes the offset tables hold (``"global"`` and ``"blocks"``; 0 before the
        first epoch): 4 a record, or with blocks over ``table_bound`` 16 a block."""
        return int(self._core().table_bytes) if self._records_core is not None else 0

    def _block(self) -> int:
        """Records a block: ``block_size``, else those of about 4 MiB."""
        if self.block_size is not None:
            return self.block_size
        return int(self._core().block)

    def _rank_range(self) -> Tuple[int, int]:
        """This rank's records in file order (the buffer shuffle)."""
        start, end = _tfshard.rank_range(self._records(), self.batch_size, self.num_shards, self.shard_index,
                                         self.drop_remainder, self.even_batches)
        return int(start), int(end)

    def _batches_of(self, records: int) -> int:
        if self.drop_remainder:
            return records // self.batch_size
        return -(-records // self.batch_size)

    def __len__(self) -> int:
        if self.shuffle != "buffer":
            return int(_tfshard.schedule_batches(self._records(), 0, self.batch_size, self.num_shards,
                                                 self.shard_index, 1, 0, self.drop_remainder,
                                                 self.even_batches))
        start, end = self._rank_range()
        return self._batches_of(end - start)

    def _worker_range(self, worker: int, workers: int) -> Tuple[int, int]:
        """A DataLoader worker's share of the rank's records: whole batches, contiguous."""
        start, end = self._rank_range()
        if workers == 1:
            return start, end
        batches = self._batches_of(end - start)
        first, last = batches * worker // workers, batches * (worker + 1) // workers
        if worker == workers - 1:
            return start + first * self.batch_size, end
        return start + first * self.batch_size, start + last * self.batch_size

    def state_dict(self) -> Dict[str, Any]:
        """Where iteration is (torchdata's ``Stateful``): a small JSON-serializable dict for
        :meth:`load_state_dict` or ``Dataset(..., state=)``. With ``shuffle="global"`` or
        ``"blocks"`` it holds the epoch's global position, which a run with another
        number of ranks, DataLoader workers or another batch size continues from (every
        record still read once in the epoch). Inside a DataLoader worker it is that
        worker's (what ``StatefulDataLoader.state_dict()`` gathers)."""
        worker, workers = _data_loader_worker()
        # A state loaded and not read from yet: where the next pass will start.
        start, batches = self._start, self._position
        if self._loaded is not None and self.shuffle == "buffer":
            batches = _resume.buffer_skip(self._loaded, worker, workers)
        elif self._loaded is not None:
            start, batches = _resume.ordered_start(self._loaded, self.batch_size, self.num_shards,
                                                   self._records(), worker, workers)
        if self.shuffle == "buffer":
            state = {"version": 1, "epoch": self._epoch, "batches": batches}
            state.update(self._config())
            if workers > 1:
                state.update(worker=worker, workers=workers)
            return state
        return {
            "version": 3,
            "tfshard": True,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "epoch": self._epoch,
            "records": self._records(),
            "block": self._block() if self.shuffle == "blocks" else None,
            "window": self.window if self.shuffle == "blocks" else None,
            "start": start,
            "batch_size": self.batch_size,
            "num_shards": self.num_shards,
            "drop_remainder": self.drop_remainder,
            "worker": worker,
            "workers": workers,
            "batches": batches,
        }

    def state(self) -> Dict[str, Any]:
        """An alias of :meth:`state_dict`."""
        return self.state_dict()

    def _config(self) -> Dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle_buffer": self.shuffle_buffer,
            "drop_remainder": self.drop_remainder,
            "num_shards": self.num_shards,
            "shard_index": self.shard_index,
            "records": self._records(),
            "cycle_length": self.cycle_length,
            "cache": self._cache,
            "even_batches": self.even_batches,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from ``state``: one :meth:`state_dict` returned, or a
        ``StatefulDataLoader``'s whole state (its workers' states are found in it). With
        ``shuffle="global"`` or ``"blocks"`` the run may have another number of ranks,
        workers or another batch size (elastic resume); with the buffer shuffle, only
        the same configuration. A state of other shards (another record count) or of
        another shuffle, seed or block size is refused (``ValueError``), and so is one
        DataLoader worker's state alone under another configuration (it cannot say where
        the epoch stands): every way to load a state continues exactly or refuses."""
        if not isinstance(state, dict):
            raise ValueError("state must be a dict that Dataset.state_dict() returned")
        found = _resume.states_in(state)
        if not found:
            raise ValueError("no tfshard Dataset state in this dict")
        if self.shuffle == "buffer":
            loaded = _resume.load_buffer(found, self._config(), self.shuffle)
        else:
            mine = {
                "shuffle": self.shuffle,
                "seed": self.seed,
                "records": self._records(),
                "block": self._block() if self.shuffle == "blocks" else None,
                "window": self.window if self.shuffle == "blocks" else None,
            }
            loaded = _resume.load_ordered(found, mine)
        if _resume.keeps(self._loaded, loaded):
            return
        if self._cache == "memory" and loaded.epoch >= 1 and any(loaded.per_worker.values()):
            raise ValueError(
                "the epoch was read from a memory cache this process does not have: resume a cached "
                "epoch with cache=PATH (a cache file), or from the epoch's start (set_epoch)"
            )
        self._epoch = loaded.epoch
        self._start = loaded.start
        self._position = 0
        self._loaded = loaded

    def __iter__(self) -> Iterator[Any]:
        worker, workers = _data_loader_worker()
        if self.shuffle != "buffer":
            return self._ordered_epoch(worker, workers)
        start, end = self._worker_range(worker, workers)
        epoch, skip = self._epoch, 0
        if self._loaded is not None:
            skip = _resume.buffer_skip(self._loaded, worker, workers)
            self._loaded = None
        cache = self._cache
        if cache not in (None, "memory") and (self.num_shards > 1 or workers > 1):
            # One file per share: ranks and workers that share a folder keep their own.
            cache = f"{cache}.{start}-{end}"
        batches = self._shards.batches(
            self.batch_size,
            shuffle_buffer=self.shuffle_buffer,
            seed=_mix(self.seed, epoch),
            drop_remainder=self.drop_remainder,
            start=start,
            end=end,
            skip_batches=skip,
            cache=cache,
            cycle_length=self.cycle_length,
            format=self.format,
        )
        return self._epoch_of(batches, epoch, skip)

    def _ordered_epoch(self, worker: int, workers: int) -> Iterator[Any]:
        """An epoch in a global order: this rank's batches of it, this worker's steps."""
        epoch, start, skip = self._epoch, self._start, 0
        if self._loaded is not None:
            start, skip = _resume.ordered_start(self._loaded, self.batch_size, self.num_shards,
                                                self._records(), worker, workers)
            self._loaded = None
        self._start = start
        core = self._core()
        threads = self.threads or min(4, os.cpu_count() or 1)
        # A worker's k-th batch is step worker + k * workers; skipping its first `skip`
        # batches starts it at step worker + skip * workers.
        batches = core.ordered(
            shuffle=self.shuffle,
            block=self._block() if self.shuffle == "blocks" else 0,
            window=self.window,
            seed=self.seed,
            epoch=epoch,
            batch_size=self.batch_size,
            start=start + skip * workers * self.batch_size * self.num_shards,
            ranks=self.num_shards,
            rank=self.shard_index,
            workers=workers,
            worker=worker,
            drop_remainder=self.drop_remainder,
            threads=threads,
            depth=threads + 1,
            even=self.even_batches,
        )
        return self._epoch_of(batches, epoch, skip)

    def _epoch_of(self, batches: Any, epoch: int, skip: int) -> Iterator[Any]:
        self._position = skip
        try:
            for batch in batches:
                self._position += 1
                yield batch
        finally:
            batches.close()
        self._epoch = epoch + 1
        self._start = self._position = 0

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled (a DataLoader's workers under the spawn start method): the native half
        # is made again from the arguments on the other side.
        state = dict(self.__dict__)
        del state["_shards"]
        state["_records_core"] = None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._shards = _Shards(*self._args)

    def __repr__(self) -> str:
        return (
            f"tfshard.Dataset({len(self.files)} files, batch_size={self.batch_size}, "
            f"shuffle_buffer={self.shuffle_buffer}, seed={self.seed}, epoch={self._epoch}, "
            f"shard {self.shard_index} of {self.num_shards})"
        )


def _is_bool(k: Any) -> bool:
    """A Python or NumPy boolean."""
    dtype = getattr(k, "dtype", None)
    return isinstance(k, bool) or (dtype is not None and dtype.kind == "b")


class Records:
    """The records of uncompressed TFRecord shards by index: a map-style dataset for
    PyTorch (``DataLoader``, ``DistributedSampler``) and a random-access data source for
    JAX's Grain (``len``, ``[i]``).

    ``paths``: shard files, folders or manifests (local or store URLs), in the order
    ``Dataset`` reads them. ``records[i]`` is record ``i`` as a dict of NumPy values (a
    fixed shape's array of that shape, a scalar's of shape ``()``, a variable length's
    flat array, bytes as ``bytes`` in an object array), or with ``raw=True`` its bytes;
    ``records[indices]`` (a list, a NumPy array or a slice) is one batch, a dict of arrays
    shaped as ``Dataset`` batches (raw: a list of bytes); ``__getitems__`` (what a
    DataLoader with a batch sampler calls) is the list of records its ``collate_fn``
    takes. ``columns``: a subset of the features.

    Each shard's record offsets come from its ``.idx`` file (``convert --index``) or
    from one walk of its frames (``table_bytes`` reports the table; a walk that would
    pass ``table_bound`` bytes is refused, saying what to do). Local shards are
    memory-mapped; a store's are read with ranged requests. A pickled ``Records`` (a
    DataLoader's spawn workers, Grain's processes) opens the shards once on the other
    side. An index out of range is ``IndexError``; a corrupt record :class:`tfshard.Error`
    naming its file, record and offset.
    """

    def __init__(
        self,
        paths: Any,
        columns: Optional[Sequence[str]] = None,
        raw: bool = False,
        *,
        compression: str = "auto",
        generations: Optional[Sequence[int]] = None,
        table_bound: Optional[int] = None,
    ) -> None:
        self._args = (
            _paths(paths),
            None if columns is None else list(columns),
            bool(raw),
            compression,
            None if generations is None else [int(g) for g in generations],
            table_bound,
        )
        self._core = _RecordsCore(*self._args)
        self._len = len(self._core)

    @property
    def raw(self) -> bool:
        """Whether records are their bytes."""
        return self._args[2]

    @property
    def files(self) -> List[str]:
        """The shard files, in index order."""
        files: List[str] = self._core.files
        return files

    @property
    def spec(self) -> List[Dict[str, Any]]:
        """The features a record holds, as :func:`schema` gives them."""
        spec: List[Dict[str, Any]] = self._core.spec
        return spec

    @property
    def table_bytes(self) -> int:
        """Bytes the offset tables hold (4 a record)."""
        size: int = self._core.table_bytes
        return size

    def __len__(self) -> int:
        return self._len

    def _index(self, i: Any) -> int:
        i = operator.index(i)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"record index {i} out of range for {self._len} records")
        return i

    def _one(self, key: Any) -> Optional[int]:
        """``key`` as one record's index (an int, a NumPy integer, a 0-d integer array),
        or None where it names a batch. A boolean is no index, as in NumPy."""
        dtype = getattr(key, "dtype", None)
        if isinstance(key, bool) or (dtype is not None and dtype.kind == "b" and getattr(key, "ndim", 1) == 0):
            raise TypeError("a boolean is not a record index (a boolean mask is an array of len(records) booleans)")
        if isinstance(key, int) or getattr(key, "ndim", None) == 0:
            return self._index(key)
        if hasattr(key, "__index__") and not hasattr(key, "__len__"):
            return self._index(key)
        return None

    def _indices(self, key: Any) -> List[int]:
        """The records a batch's key names, as NumPy indexing reads it: a slice, a
        sequence or 1-d array of indices (negative from the end), or a boolean mask of
        ``len(records)`` (a NumPy bool array, or a list of bools)."""
        if isinstance(key, slice):
            return list(range(*key.indices(self._len)))
        dtype = getattr(key, "dtype", None)
        if dtype is not None:
            if getattr(key, "ndim", 1) != 1:
                raise IndexError(f"record indices are one-dimensional, not of shape {tuple(key.shape)}")
            mask = dtype.kind == "b"
            key = key.tolist()
        else:
            key = list(key)
            mask = bool(key) and all(_is_bool(k) for k in key)
        if mask:
            if len(key) != self._len:
                raise IndexError(f"a boolean mask of {len(key)} for {self._len} records")
            return [i for i, k in enumerate(key) if k]
        if any(_is_bool(k) for k in key):
            raise TypeError("record indices mix booleans and integers")
        return [self._index(i) for i in key]

    def __getitem__(self, key: Any) -> Any:
        one = self._one(key)
        if one is not None:
            return self._core.get(one)
        return self._core.get_batch(self._indices(key))

    def __getitems__(self, indices: Sequence[int]) -> List[Any]:
        records: List[Any] = self._core.get_list(self._indices(indices))
        return records

    def __getstate__(self) -> Dict[str, Any]:
        return {"args": self._args}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self._args = tuple(state["args"])
        self._core = _RecordsCore(*self._args)
        self._len = len(self._core)

    def __repr__(self) -> str:
        return f"tfshard.Records({self._len} records in {len(self.files)} files{', raw' if self.raw else ''})"
