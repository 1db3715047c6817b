"""Testing support for tritnum users: hypothesis strategies.

Requires ``hypothesis`` (the ``test`` extra)::

    from tritnum.testing import trit_arrays, packed_trits
"""

from .strategies import packed_trits, ternary_tensors, trit_arrays, trit_shapes

__all__ = ["packed_trits", "ternary_tensors", "trit_arrays", "trit_shapes"]
