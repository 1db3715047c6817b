"""Dask arrays through tritnum's public ops: lazy in, lazy out.

The public functions hand a Dask input here (``_interop.dask_layer``) after
checking all that can be checked without reading it: dtypes, shapes, arguments.
What comes back is lazy: a Dask array, or a :class:`~tritnum.PackedTrits` /
:class:`~tritnum.TernaryTensor` over Dask arrays, whose every task runs the
in-memory public op on its chunk (the same kernels and the same checks), so
that results equal the in-memory ones exactly for any chunking. ``import
tritnum`` never imports this package, nor dask.

Conventions:

- Chunks run along the leading axes. The packed axis (the last; the last two,
  planes and words, of a "bitplane" buffer) lies whole in every chunk: an input
  split along it is rechunked first.
- A lazy PackedTrits has a Dask array as ``data``: the packed buffer, chunked
  as the trits were. ``unpack``, ``to``, indexing and the VSA ops stay lazy;
  ``tn.PackedTrits(p.data.compute(), p.shape, p.format)`` makes it concrete.
- The device is resolved on the client and handed to every task.
- Errors in the data (a value that is not a trit, NaN) are raised when the
  result is computed, as Dask raises a task's error; their indices count from
  the start of the chunk that held them.
- What every task reads whole (the weights of ``linear``, queries held in
  memory) goes to the workers once: scattered to all of them when a
  ``distributed`` client is the scheduler, else one graph key that every task
  depends on (:func:`~tritnum._dask.chunks.shared`).

Internal API used by (through ``_interop.dask_layer()``, all in ``__all__``; checked by
tests/test_architecture_seams.py):

- ``packing``: ``pack``, ``unpack``, ``convert``, ``packed_token``;
- ``quantize``: ``quantize``, ``quantize_activations``, ``dequantize``, ``in_memory``;
- ``matmul``: ``linear``;
- ``vsa.algebra``: ``elementwise``, ``bundle``, ``permute``; ``vsa.generation``: ``random``;
  ``vsa.memory``: ``memory_vectors``; ``vsa.similarity_search``: ``similarity``, ``search``.
"""

from .arrays import convert, dequantize, pack, packed_token, unpack
from .matmul import linear
from .quantize import in_memory, quantize, quantize_activations
from .search import search
from .vsa import bundle, elementwise, memory_vectors, permute, random, similarity

__all__ = [
    "bundle",
    "convert",
    "dequantize",
    "elementwise",
    "in_memory",
    "linear",
    "memory_vectors",
    "pack",
    "packed_token",
    "permute",
    "quantize",
    "quantize_activations",
    "random",
    "search",
    "similarity",
    "unpack",
]
