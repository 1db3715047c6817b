"""Kernel code shared by several backends (and the public layer), one module per family.

``packing``, ``gguf``, ``vsa``, ``quantize``: each family's per-unit/per-block codecs
that the numba backends compile (njit and cuda.jit device functions) and the NumPy
helpers several users need; ``floatbits``: float32 bit tricks of several families;
``select``: host top-k. Nothing here imports a backend; importing it imports no numba.
"""
