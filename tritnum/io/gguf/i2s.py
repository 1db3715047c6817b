"""bitnet.cpp's I2_S layouts, as element orders over one codec.

bitnet.cpp's ``quantize_i2_s`` (``src/ggml-bitnet-mad.cpp``) writes the same codes
(t + 1, 2 bits each, one float32 scale after the ``n / 4`` code bytes) in one of
three byte layouts, chosen when bitnet.cpp is compiled:

==================  ============================================================
``"x86"``           x86 with ``ACT_PARALLEL`` (``include/gemm-config.h`` defines
                    it; the default): the tensor flattened, 128-element blocks of
                    32 bytes; element j of a block at byte j % 32, shift
                    6 - 2 (j // 32). Also every ARM build before November 2025.
``"x86-interleaved"`` x86 without ``ACT_PARALLEL``: four rows per byte; byte
                    ``(r // 4) * n_per_row + c`` holds element (r, c) at shift
                    6 - 2 (r % 4). The row count must be a multiple of 4.
``"arm"``           ARM NEON since bitnet.cpp's commit 112f853 (2025-11-19):
                    64-element blocks of 16 bytes; element j of a block at byte
                    j % 16, shift 6 - 2 (j // 16).
==================  ============================================================

Rows are the tensor's leading axes flattened (``n_per_row = shape[-1]``). Every
layout puts the codes of element order ``e`` into the ``"x86"`` codec's order by
a permutation (and back), so one codec, its CPU and CUDA kernels included, encodes
and decodes all three: :func:`to_codec_order` rearranges values, codes or trits
(a NumPy reshape and transpose, one copy) and pads them to whole 128-element
blocks with ``fill``; the codec's first ``n / 4`` bytes are then the layout's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..._validate import choice
from ...errors import ShapeMismatchError

__all__ = ["LAYOUTS", "check_shape", "codec_size", "from_codec_order", "layout",
           "to_codec_order"]

LAYOUTS = ("x86", "x86-interleaved", "arm")


def layout(value: object) -> str:
    """``value`` if it names an I2_S layout, else ValueError listing them."""
    return choice(value, "layout", LAYOUTS)


def check_shape(shape: tuple[int, ...], layout: str) -> None:
    """ShapeMismatchError for a shape the layout cannot hold.

    bitnet.cpp would drop or misplace values: its loops run over whole blocks, and
    the interleaved one over whole groups of 4 rows.
    """
    if layout == "x86-interleaved":
        if len(shape) < 2 or math.prod(shape[:-1]) % 4:
            raise ShapeMismatchError(
                f"I2_S layout 'x86-interleaved' packs 4 rows per byte: it needs a row "
                f"count that is a multiple of 4, got shape {shape}",
                expected="prod(shape[:-1]) % 4 == 0", actual=shape)
        return
    block = 64 if layout == "arm" else 128
    if math.prod(shape) % block:
        raise ShapeMismatchError(
            f"I2_S needs a multiple of {block} values"
            f"{' (its arm layout)' if layout == 'arm' else ''}, got shape {shape}",
            expected=f"size % {block} == 0", actual=shape)


def codec_size(n: int, layout: str) -> int:
    """How many values :func:`to_codec_order` gives for ``n`` (``n`` padded to whole blocks)."""
    return n if layout == "x86" or not n else -(-n // 128) * 128


def _padded(a: np.ndarray, size: int, fill: Any) -> np.ndarray:
    if a.shape[0] == size:
        return a
    out = np.empty((size, *a.shape[1:]), a.dtype)
    out[: a.shape[0]] = a
    out[a.shape[0]:] = fill
    return out


def to_codec_order(a: np.ndarray, shape: tuple[int, ...], layout: str, fill: Any) -> np.ndarray:
    """The flat elements ``a`` (row-major) in the ``"x86"`` codec's order for ``layout``.

    Padded with ``fill`` to a multiple of 128 elements.
    """
    a = a.reshape(-1)
    n = a.size
    if layout == "x86" or not n:
        return a
    if layout == "arm":  # x86 block B, byte p of its 32: arm block 2B + p // 16, byte p % 16
        blocks = _padded(a, -(-n // 128) * 128, fill)
        return blocks.reshape(-1, 2, 4, 16).transpose(0, 2, 1, 3).reshape(-1)
    # interleaved: byte m holds rows 4 (m // n_per_row) + k, column m % n_per_row, k = 0..3
    per_row = shape[-1]
    by_byte = a.reshape(-1, 4, per_row).transpose(0, 2, 1).reshape(-1, 4)
    by_byte = _padded(by_byte, -(-by_byte.shape[0] // 32) * 32, fill)
    return by_byte.reshape(-1, 32, 4).transpose(0, 2, 1).reshape(-1)


def from_codec_order(c: np.ndarray, shape: tuple[int, ...], layout: str) -> np.ndarray:
    """Inverse of :func:`to_codec_order`: the codec's flat output back in element order."""
    c = c.reshape(-1)
    n = math.prod(shape)
    if layout == "x86" or not n:
        return c[:n]
    if layout == "arm":
        return c.reshape(-1, 4, 2, 16).transpose(0, 2, 1, 3).reshape(-1)[:n]
    per_row = shape[-1]
    by_byte = c.reshape(-1, 4, 32).transpose(0, 2, 1).reshape(-1, 4)[: n // 4]
    return by_byte.reshape(-1, per_row, 4).transpose(0, 2, 1).reshape(-1)
