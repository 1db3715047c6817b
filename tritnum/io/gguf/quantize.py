"""Re-quantize a whole GGUF model file to ternary, as llama.cpp's ``llama-quantize`` does.

:func:`quantize_gguf` reads an F32/F16/BF16 model memory-mapped and writes it tensor
by tensor, a few MiB of rows at a time, dropping each part of the input from memory
once written (peak memory a few tens of MiB above the largest kept chunk, not the
model). Metadata is copied in order; ``general.file_type`` and
``general.quantization_version`` are set as llama-quantize sets them.

Which tensors are quantized follows llama.cpp's ``src/llama-quant.cpp``
(``tensor_allows_quantization`` and the TQ1_0/TQ2_0 type choice):

- only tensors with a dimension past the first above 1 (ggml's ``n_dims >= 2``),
  whose name ends in ``weight``, stored as F32, F16 or BF16;
- never norms (``_norm.weight``), expert routers (``ffn_gate_inp``), position and
  token-type embeddings, and the small tensors llama.cpp lists by name (RWKV's
  ``time_mix_*``, Mamba's ``ssm_conv1d``, vision and audio encoders' parts...);
- token embeddings and ``output.weight`` stay as they are: llama-quantize makes them
  Q4_K and Q6_K, which tritnum does not write (``include=`` quantizes them);
- a row length that is not a multiple of the block (256 for TQ types; 128 for
  I2_S, 64 with its arm layout): llama-quantize falls back to Q4_0 or F16, tritnum
  keeps the tensor as it is; so is a tensor with no values (a dimension of 0).

A big-endian file (``gguf.GGUFWriter(..., endianess=GGUFEndian.BIG)``, llama.cpp's
``--bigendian`` conversions) is read in its byte order and written little-endian, as
llama.cpp's and the ``gguf`` package's writers lay files out by default: the same
values as from the little-endian file, with the metadata, F32/F16/BF16/F64 and integer
tensors converted element by element (as ``gguf_convert_endian.py`` swaps them). A
big-endian file that would keep a block-type tensor (Q8_0, Q4_K...) is refused with
FormatError: its blocks' inner fields would need swapping per type.

Quantized bytes equal llama-quantize's (``quantize_row_tq*_0_ref`` through
``ggml_quantize_chunk``; bitnet.cpp's ``quantize_i2_s``), with one exception: a block
whose maximum |x| reaches 65520 raises FormatError, where llama.cpp writes an
infinite float16 scale.
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import numpy as np

from ..._validate import choice
from ...errors import FormatError, ShapeMismatchError
from ...typing import GGUFQType, I2SLayout
from ..arrays import bfloat16_to_float32
from ..suffixes import check_writer_suffix
from . import i2s
from .blocks import QTYPES, to_gguf_blocks
from .container import (
    PLAIN_CODES,
    Entry,
    FileSlice,
    TensorInfo,
    drop_pages,
    ggml_type_id,
    ggml_type_name,
    map_file,
    plain_view,
    tensor_nbytes,
    write_file,
)
from .encode import FLOATS, float_bytes
from .file import progress_bar
from .model import GGUFReport, TensorReport, alignment_of
from .values import GGUFValue

__all__ = ["FILE_TYPES", "quantize_gguf"]

# llama.cpp's LLAMA_FTYPE_MOSTLY_TQ1_0 / TQ2_0, bitnet.cpp's LLAMA_FTYPE_MOSTLY_I2_S
FILE_TYPES = {"TQ1_0": 36, "TQ2_0": 37, "I2_S": 40}
QUANTIZATION_VERSION = 2  # GGML_QNT_VERSION
CHUNK_BYTES = 4 << 20  # float32 bytes of rows encoded at a time (8 and 16 MiB: no faster,
# 10 and 34 MiB more resident)
_SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")
# name parts llama.cpp's tensor_allows_quantization never quantizes
_KEPT_PARTS = (
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
    "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
    "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
    "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
    "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
    ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
    ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
)
_KEPT_NAMES = {"position_embd.weight": "position embeddings",
               "token_types.weight": "token type embeddings",
               "token_embd.weight": "token embeddings (llama-quantize: Q4_K)",
               "per_layer_token_embd.weight": "token embeddings (llama-quantize: Q4_K)",
               "output.weight": "output layer (llama-quantize: Q6_K)"}


def _matcher(patterns: Any, what: str) -> Callable[[str], bool]:
    """Tensor names to a bool: glob patterns (a str or several) or a callable."""
    if patterns is None:
        return lambda name: False
    if callable(patterns):
        return lambda name: bool(patterns(name))
    if isinstance(patterns, str):
        patterns = [patterns]
    patterns = list(patterns)
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{what} must be glob patterns (str) or a callable, got {patterns!r}")
    return lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _name_rule(name: str) -> str | None:
    """Why llama.cpp keeps a tensor of this name in float, or None."""
    if not name.endswith("weight"):
        return "not a weight"
    if name in _KEPT_NAMES:
        return _KEPT_NAMES[name]
    for part in _KEPT_PARTS:
        if part in name:
            return "a norm" if part == "_norm.weight" else f"llama.cpp keeps {part!r} tensors"
    return None


def _shape_rule(info: TensorInfo, qtype: str, layout: str) -> str | None:
    """Why a tensor cannot become ``qtype``, or None."""
    if info.type_name not in FLOATS:
        return f"{info.type_name} is not F32, F16 or BF16"
    if not any(d > 1 for d in info.shape[:-1]):
        return "1-D"  # ggml_n_dims < 2
    if not math.prod(info.shape):
        return "empty: no values to quantize"
    row = info.shape[-1]
    block = 256 if qtype != "I2_S" else 64 if layout == "arm" else 128
    if row % block:
        return f"row length {row} is not a multiple of {block}"
    if qtype == "I2_S":
        try:
            i2s.check_shape(info.shape, layout)
        except ShapeMismatchError as exc:
            return str(exc)
    return None


def _kept(info: TensorInfo, qtype: str, layout: str, wanted: Callable[[str], bool],
          unwanted: Callable[[str], bool]) -> str | None:
    """Why a tensor is kept as it is, or None to quantize it."""
    if unwanted(info.name):
        return "excluded"
    reason = _shape_rule(info, qtype, layout)
    if reason is None and not wanted(info.name):
        reason = _name_rule(info.name)
    return reason


def _floats(data: np.ndarray, source: str, order: str) -> np.ndarray:
    """Float values of a raw F32/F16/BF16 slice in byte ``order`` (BF16 widened, exactly)."""
    view = plain_view(data, source, order)
    if source == "BF16":
        return bfloat16_to_float32(view)
    return view if order == "<" else view.astype(view.dtype.newbyteorder("="))


def _quantized(raw: np.ndarray, order: str, info: TensorInfo, qtype: str,
               layout: str) -> Iterator[Any]:
    """The tensor's ``qtype`` bytes, a chunk of rows at a time (I2_S: then its scale)."""
    row = info.shape[-1]
    rows = math.prod(info.shape[:-1])
    step = max(1, CHUNK_BYTES // (4 * row))
    if layout == "x86-interleaved":
        step = max(4, step - step % 4)
    in_row = tensor_nbytes((row,), ggml_type_id(info.type_name))
    scale = np.float32(0)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        start = info.start + r0 * in_row
        values = _floats(raw[start: info.start + r1 * in_row], info.type_name, order)
        try:
            blocks = to_gguf_blocks(values.reshape(r1 - r0, row), qtype, layout=layout)
        except (FormatError, ValueError) as exc:
            raise type(exc)(f"tensor {info.name!r}, rows {r0}..{r1 - 1}: {exc}") from exc
        if qtype == "I2_S":
            scale = max(scale, blocks[-32:-28].view(np.float32)[0])
            blocks = blocks[:-32]
        yield blocks
        drop_pages(raw, start, (r1 - r0) * in_row)
    if qtype == "I2_S":
        yield np.float32(scale).tobytes() + bytes(28)


def _copy_refused(info: TensorInfo, order: str) -> str | None:
    """Why a kept tensor cannot be copied into the (little-endian) output, or None."""
    if order == ">" and info.type_name not in PLAIN_CODES:
        return (f"tensor {info.name!r}: {info.type_name} blocks in a big-endian file, which "
                "tritnum does not byte-swap (the output is little-endian); convert the file "
                "to little-endian first (the gguf package's gguf_convert_endian.py FILE "
                "little)")
    return None


def _copied(raw: np.ndarray, order: str, source: int, info: TensorInfo) -> Iterator[Any]:
    """The tensor's bytes unchanged, copied from the ``source`` file by the kernel.

    F64 is converted to F32, and a big-endian file's plain tensors to little-endian,
    a few MiB at a time.
    """
    if info.type_name != "F64" and order == "<":
        yield FileSlice(source, info.start, info.nbytes)
        return
    for start in range(info.start, info.start + info.nbytes, CHUNK_BYTES):
        end = min(start + CHUNK_BYTES, info.start + info.nbytes)
        values = plain_view(raw[start:end], info.type_name, order)
        if info.type_name != "F64":
            yield values.astype(values.dtype.newbyteorder("<"))
        else:
            try:
                yield float_bytes(values, "F32")
            except FormatError as exc:
                raise FormatError(f"tensor {info.name!r}: {exc}") from exc
        drop_pages(raw, start, end - start)


def _metadata(metadata: dict[str, GGUFValue], qtype: str, where: str) -> dict[str, GGUFValue]:
    count = metadata.get("split.count")
    if count is not None and "int" not in count.type:  # llama.cpp writes a uint16
        raise FormatError(f"{where}: its split.count is of type {count.type}, not an integer "
                          "(the file's count of shards)")
    if count is not None and count.value > 1:
        raise FormatError(f"{where}: a shard of a model split in {count.value} files; merge "
                          "them first (llama.cpp's gguf-split --merge)")
    out = {k: v for k, v in metadata.items() if k not in _SPLIT_KEYS}
    out["general.quantization_version"] = GGUFValue("uint32", QUANTIZATION_VERSION)
    out["general.file_type"] = GGUFValue("uint32", FILE_TYPES[qtype])
    return out


def quantize_gguf(src: str | os.PathLike[str], dst: str | os.PathLike[str],
                  qtype: GGUFQType = "TQ2_0", *,
                  include: str | Iterable[str] | Callable[[str], bool] | None = None,
                  exclude: str | Iterable[str] | Callable[[str], bool] | None = None,
                  layout: I2SLayout = "x86", progress: bool | None = None) -> GGUFReport:
    """Quantize a float GGUF model file to TQ2_0, TQ1_0 or I2_S, tensor by tensor.

    Parameters
    ----------
    src : path-like
        An F32/F16/BF16 GGUF file (as llama.cpp's or bitnet.cpp's converters write
        them), little- or big-endian. It is memory-mapped, not loaded.
    dst : path-like
        The file to write (written under a temporary name, renamed once complete),
        little-endian whatever the byte order of ``src``.
    qtype : {"TQ2_0", "TQ1_0", "I2_S"}
        The ternary type of the quantized tensors.
    include : glob pattern(s) or callable, optional
        Tensors to quantize beyond llama.cpp's choice (e.g. ``"output.weight"``,
        ``"token_embd.weight"``); those whose type or shape cannot be quantized are
        kept and reported.
    exclude : glob pattern(s) or callable, optional
        Tensors to keep as they are (over ``include``).
    layout : {"x86", "x86-interleaved", "arm"}
        I2_S's byte layout (which bitnet.cpp build will read the file).
    progress : bool, optional
        A tqdm bar over the tensors; by default for files with 8 tensors or more.

    Returns
    -------
    GGUFReport
        Each tensor's type before and after, and why a tensor was kept.

    Raises
    ------
    FormatError
        A ``dst`` ending in another format's extension; a source that is not a
        readable GGUF file, a shard of a split model, a big-endian file that would
        keep a block-type tensor (Q8_0, Q4_K...), or a block whose float16 scale
        would be infinite.
    ValueError
        NaN or infinity in a tensor to be quantized (naming it and its rows).
    OSError
        ``src`` cannot be opened: ``FileNotFoundError``, ``PermissionError``,
        ``IsADirectoryError``, raised unchanged (not a FormatError).

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> folder = tempfile.mkdtemp()
    >>> src, dst = os.path.join(folder, "f16.gguf"), os.path.join(folder, "tq2.gguf")
    >>> rng = np.random.default_rng(0)
    >>> _ = tn.io.write_gguf(src, {
    ...     "token_embd.weight": rng.standard_normal((32, 256)).astype(np.float16),
    ...     "blk.0.attn_q.weight": rng.standard_normal((256, 256)).astype(np.float16),
    ...     "blk.0.attn_norm.weight": np.ones(256, np.float32)}, arch="llama")
    >>> print(tn.io.quantize_gguf(src, dst, "TQ2_0"))  # doctest: +ELLIPSIS
    GGUFReport('...tq2.gguf', ... bytes, 3 tensors: 1 F16, 1 TQ2_0, 1 F32)
      token_embd.weight  [32x256]  F16  16384 bytes  (token embeddings (llama-quantize: Q4_K))
      blk.0.attn_q.weight  [256x256]  F16 -> TQ2_0  16896 bytes
      blk.0.attn_norm.weight  [256]  F32  1024 bytes  (1-D)
    >>> tn.io.read_gguf(dst).metadata["general.file_type"]
    GGUFValue('uint32', 37)
    """
    qtype = choice(qtype, "qtype", QTYPES, FormatError)
    layout = i2s.layout(layout)
    check_writer_suffix(dst, "quantize_gguf", "GGUF")
    wanted, unwanted = _matcher(include, "include"), _matcher(exclude, "exclude")
    raw, header = map_file(src)
    where = f"cannot quantize {os.fspath(src)!r}"
    metadata = _metadata(header.metadata, qtype, where)
    entries, reports = [], {}
    with open(src, "rb") as source:  # kept tensors are copied from it by the kernel
        for info in header.tensors:
            kept = _kept(info, qtype, layout, wanted, unwanted)
            if kept is None:
                out = ggml_type_id(qtype)
                chunks: Callable[[], Iterable[Any]] = partial(_quantized, raw, header.order,
                                                              info, qtype, layout)
            else:
                refused = _copy_refused(info, header.order)
                if refused:
                    raise FormatError(f"{where}: {refused}")
                out = ggml_type_id("F32") if info.type_name == "F64" else info.type_id
                chunks = partial(_copied, raw, header.order, source.fileno(), info)
            nbytes = tensor_nbytes(info.shape, out)
            entries.append(Entry(info.name, info.shape, out, nbytes, chunks))
            reports[info.name] = TensorReport(info.name, info.shape, info.type_name,
                                              ggml_type_name(out), nbytes, note=kept or "")
        size = write_file(dst, metadata, entries, alignment_of(metadata), lambda items:
                          progress_bar(items, len(entries), "quantizing", progress))
    return GGUFReport(os.fspath(dst), size, reports)
