"""Reading ``.npz`` files: every way a file can be unreadable becomes a FormatError."""

from __future__ import annotations

import contextlib
import os
import zipfile
from collections.abc import Iterator

from .errors import FormatError

# what np.load, json and a malformed header raise on a truncated, corrupt or foreign file
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError,
               zipfile.BadZipFile, EOFError)


@contextlib.contextmanager
def reading(path: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Run the body; what an unreadable file raises becomes FormatError (not a ``what``)."""
    try:
        yield
    except FormatError:
        raise
    except _UNREADABLE as exc:
        raise FormatError(f"{os.fspath(path)!r} is not a readable {what}: {exc}") from exc
