"""Error classes raised by tritnum.

Every error derives from :class:`TritnumError`, so ``except tn.TritnumError``
catches anything tritnum raises on purpose. The value errors also derive from
:class:`ValueError`, so code written against NumPy's conventions keeps working.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DeviceUnavailableError",
    "FormatError",
    "InvalidTritsError",
    "ShapeMismatchError",
    "TritnumError",
]


class TritnumError(Exception):
    """Base class of every error tritnum raises."""


class InvalidTritsError(TritnumError, ValueError):
    """A value outside {-1, 0, +1}, or a packed code no encoder produces."""


class ShapeMismatchError(TritnumError, ValueError):
    """An array has the wrong shape; ``.expected`` and ``.actual`` say how."""

    def __init__(self, message: str, *, expected: Any, actual: Any) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class FormatError(TritnumError, ValueError):
    """An unknown format, or a buffer of the wrong size or dtype for its format."""


class DeviceUnavailableError(TritnumError, RuntimeError):
    """A device was asked for explicitly but cannot be used here."""
