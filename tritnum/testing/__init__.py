"""Testing support for tritnum users: hypothesis strategies.

Requires ``hypothesis`` (``pip install hypothesis``; the ``test`` extra)::

    from tritnum.testing import trit_arrays, packed_trits
"""

try:
    import hypothesis as _hypothesis  # noqa: F401  (named if missing)
except ImportError as error:
    from .._extras import missing

    raise ImportError(missing("tritnum.testing", "test")) from error

from .strategies import packed_trits, ternary_tensors, trit_arrays, trit_shapes

__all__ = ["packed_trits", "ternary_tensors", "trit_arrays", "trit_shapes"]
