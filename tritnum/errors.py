"""Error classes raised by tritnum.

Every error derives from :class:`TritnumError`, so ``except tn.TritnumError``
catches anything tritnum raises on purpose. The value errors also derive from
:class:`ValueError`, so code written against NumPy's conventions keeps working.

>>> import numpy as np, tritnum as tn
>>> try:
...     tn.linear(np.ones(5), tn.quantize(np.ones((2, 4))))
... except tn.ShapeMismatchError as e:
...     print(e.expected, e.actual, isinstance(e, ValueError))
4 5 True
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
    """Base class of every error tritnum raises.

    Examples
    --------
    >>> import tritnum as tn
    >>> issubclass(tn.FormatError, tn.TritnumError)
    True
    """


class InvalidTritsError(TritnumError, ValueError):
    """A value outside {-1, 0, +1}, or a packed code no encoder produces.

    Examples
    --------
    >>> import tritnum as tn
    >>> tn.pack([1, 2, 0])
    Traceback (most recent call last):
    ...
    tritnum.errors.InvalidTritsError: trits[1] = 2 is not a trit; values must be -1, 0 or +1
    """


class ShapeMismatchError(TritnumError, ValueError):
    """An array has the wrong shape; ``.expected`` and ``.actual`` say how.

    Parameters
    ----------
    message : str
        The error message.
    expected : object
        What was expected: a shape, a size, or a description (``"ndim == 2"``);
        kept as the ``expected`` attribute.
    actual : object
        What was found (a shape or a size); kept as the ``actual`` attribute.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> tn.quantize(np.ones((2, 6)), group_size=4)
    Traceback (most recent call last):
    ...
    tritnum.errors.ShapeMismatchError: group_size must divide the last axis (6), got 4
    """

    def __init__(self, message: str, *, expected: Any, actual: Any) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class FormatError(TritnumError, ValueError):
    """An unknown format, or a buffer of the wrong size or dtype for its format.

    Examples
    --------
    >>> import tritnum as tn
    >>> tn.pack([1, 0], "3bit")
    Traceback (most recent call last):
    ...
    tritnum.errors.FormatError: format must be one of '2bit', 'base3', 'bitplane', got '3bit'
    """


class DeviceUnavailableError(TritnumError, RuntimeError):
    """A device was asked for explicitly but cannot be used here.

    Examples
    --------
    >>> import tritnum as tn
    >>> issubclass(tn.DeviceUnavailableError, RuntimeError)
    True
    """
