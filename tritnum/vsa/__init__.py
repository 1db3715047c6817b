"""Vector symbolic architectures (hyperdimensional computing) on ternary hypervectors.

Hypervectors are dense int8 arrays of trits ``(..., d)`` or "bitplane"
:class:`~tritnum.PackedTrits`; every operation returns the kind it was given,
and on bitplanes works on 64 trits per machine word (AND/OR/XOR, popcount,
bit-sliced counting). Random hypervectors come from a counter-based generator:
the same vectors for the same ``(seed, row, column)`` on every device.

Axes: trits always lie along the last axis. :func:`bundle` reduces the axis
it is given, the leading one by default, as NumPy's reductions name theirs:
``bundle(vs)`` of ``(n, d)`` vectors is one ``(d,)`` vector; for a batch of
sets ``(batch, n, d)`` (torchhd's ``multiset``) pass ``axis=-2``. The
sequence encoders (:func:`bundle_sequence`, :func:`ngrams`,
:func:`hash_table`) read ``(..., n, d)``: the sequence runs along axis -2 and
any axes before it are a batch. Both agree on two-dimensional input.

>>> import tritnum as tn
>>> apple, red = tn.vsa.random(2, 10_000, seed=7)
>>> record = tn.vsa.bind(apple, red)
>>> bool((tn.vsa.unbind(record, red) == apple)[red != 0].all())
True
"""

from .algebra import bind, bundle, negate, permute, unbind
from .classify import Centroid
from .encoders import encode_features, level_indices
from .generation import circular, identity, level, random
from .memory import ItemMemory
from .resonator import Factorization, resonator
from .sdm import SparseDistributedMemory
from .sequences import bind_sequence, bundle_sequence, hash_table, ngrams
from .similarity_search import search, similarity
from .structures import (
    automaton,
    automaton_step,
    cleanup,
    graph,
    graph_neighbors,
    tree,
    tree_leaf,
)

__all__ = [
    "Centroid",
    "Factorization",
    "ItemMemory",
    "SparseDistributedMemory",
    "automaton",
    "automaton_step",
    "bind",
    "bind_sequence",
    "bundle",
    "bundle_sequence",
    "circular",
    "cleanup",
    "encode_features",
    "graph",
    "graph_neighbors",
    "hash_table",
    "identity",
    "level",
    "level_indices",
    "negate",
    "ngrams",
    "permute",
    "random",
    "resonator",
    "search",
    "similarity",
    "tree",
    "tree_leaf",
    "unbind",
]

# scikit-learn estimators of raw features (tritnum.vsa.estimators): loaded, with
# scikit-learn, on first use; not in __all__, so that a star import does not load them
_ESTIMATORS = ("AdaptHDClassifier", "CentroidClassifier", "NeuralHDClassifier",
               "OnlineHDClassifier", "QuantHDClassifier", "SparseHDClassifier")


def __getattr__(name: str) -> object:
    if name in _ESTIMATORS:
        from . import estimators

        return getattr(estimators, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_ESTIMATORS])
