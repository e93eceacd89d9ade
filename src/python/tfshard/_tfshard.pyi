"""Type stubs of tfshard's native module (the package's public API is in __init__.py)."""

from typing import Any, Dict, Iterator, List, Optional, Union

__version__: str

class Error(Exception):
    """Bad data: the command line's one-line message, with where it happened."""

    message: str
    hint: Optional[str]
    file: Optional[str]
    column: Optional[str]
    row: Optional[int]
    record: Optional[int]
    offset: Optional[int]

def run(argv: List[str], stream: Optional[Any] = None) -> str: ...

class Shards:
    files: List[str]
    spec: str
    def __init__(
        self,
        paths: List[str],
        columns: Optional[List[str]] = None,
        compression: str = "auto",
        threads: Optional[int] = None,
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
