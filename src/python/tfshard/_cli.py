"""The ``tfshard`` command of the wheel: the command line of the library in the extension
module (the same code as the ``tfshard`` binary), so the wheel holds the library once."""

import signal
import sys


def main() -> None:
    """Runs ``tfshard ARGS...`` and exits with its code (0, 1 bad data, 2 usage, 130/143
    interrupted)."""
    # As a program has them: SIGINT ends the command (its own handlers, where it installs
    # them, clean up first), instead of waiting for Python's KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from ._tfshard import main as _main

    sys.exit(_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
