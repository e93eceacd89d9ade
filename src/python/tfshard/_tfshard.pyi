"""Type stubs of tfshard's native module (the package's public API is in __init__.py)."""

from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

__version__: str

class Error(Exception):
    """Bad data: the command line's one-line message, its kind, and where it happened."""

    message: str
    kind: str
    hint: Optional[str]
    file: Optional[str]
    column: Optional[str]
    row: Optional[int]
    record: Optional[int]
    offset: Optional[int]

class CorruptInputError(Error): ...
class SchemaMismatchError(Error): ...
class StoreError(Error): ...
class Interrupted(Error): ...

def main(argv: List[str]) -> int: ...
def convert(
    format: str, inputs: List[str], output: str, stream: Optional[Any], options: Dict[str, Any]
) -> Dict[str, Any]: ...
def verify(paths: List[str], options: Dict[str, Any]) -> Dict[str, Any]: ...
def schema(paths: List[str], options: Dict[str, Any]) -> Any: ...
def finalize(output: str, options: Dict[str, Any]) -> Dict[str, Any]: ...
def compact(output: str, options: Dict[str, Any]) -> Dict[str, Any]: ...
def schedule_batches(
    n: int, start: int, batch: int, ranks: int, rank: int, workers: int, worker: int, drop_remainder: bool, even: bool
) -> int: ...
def rank_range(n: int, batch: int, ranks: int, rank: int, drop_remainder: bool, even: bool) -> Tuple[int, int]: ...

class Inspect:
    most_held: int
    def __init__(self, path: str, options: Dict[str, Any]) -> None: ...
    def __iter__(self) -> "Inspect": ...
    def __next__(self) -> Dict[str, Any]: ...
    def close(self) -> None: ...

class Shards:
    files: List[str]
    spec: List[Dict[str, Any]]
    def __init__(
        self,
        paths: List[str],
        columns: Optional[List[str]] = None,
        compression: str = "auto",
        threads: Optional[int] = None,
        generations: Optional[List[int]] = None,
    ) -> None: ...
    def counts(self) -> List[int]: ...
    def batches(
        self,
        batch_size: int,
        *,
        shuffle_buffer: int,
        seed: int,
        drop_remainder: bool,
        start: Optional[int] = None,
        end: Optional[int] = None,
        skip_batches: int = 0,
        cache: Optional[str] = None,
        cycle_length: Optional[int] = None,
        format: str = "numpy",
    ) -> "Batches": ...

class Batches:
    def __iter__(self) -> Iterator[Union[Dict[str, Any], Any]]: ...
    def __next__(self) -> Union[Dict[str, Any], Any]: ...
    def close(self) -> None: ...
