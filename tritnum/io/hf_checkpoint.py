"""Hugging Face ``bitnet`` model directories: ``config.json`` and (sharded) safetensors.

A transformers BitNet checkpoint (``BitNetForCausalLM``, microsoft/bitnet-b1.58-2B-4T
and its kin) is a directory holding ``config.json`` (its ``quantization_config``
says ``quant_method: "bitnet"``, the ``linear_class`` and the
``quantization_mode``) and the tensors, in ``model.safetensors`` or in shards named
by ``model.safetensors.index.json``. :func:`read_hf_bitnet` reads one into
TernaryTensors (the projections, through :func:`~tritnum.io.from_hf_bitnet`) and
arrays (the rest); :func:`write_hf_bitnet` writes one that
``BitNetForCausalLM.from_pretrained`` loads (offline mode: packed weights).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Literal

import numpy as np

from .._npz import field
from .._validate import choice
from ..errors import FormatError, TritnumError
from ..packing import pack
from ..quantize import TernaryTensor
from .arrays import bfloat16_to_float32, is_array, plain_array
from .gguf.file import check_mapped, drop_view
from .gguf.model import LazyTernary
from .hf_bitnet import (
    LINEAR_CLASSES,
    SCALE_DTYPES,
    decode_scale,
    from_hf_bitnet,
    real_bias,
    to_hf_bitnet,
)
from .safetensors_file import SafetensorsFile, read_safetensors, write_safetensors
from .safetensors_header import FILE, json_object

__all__ = ["CONFIG", "INDEX", "SINGLE", "bitnet_settings", "open_hf_bitnet", "read_config",
           "read_hf_bitnet", "write_hf_bitnet"]

CONFIG, INDEX, SINGLE = "config.json", "model.safetensors.index.json", "model.safetensors"
_SCALE, _WEIGHT, _BIAS = ".weight_scale", ".weight", ".bias"
_PROJECTION = "_proj.weight"  # the linear layers of transformers' bitnet architecture
_MAX_JSON = 100_000_000  # bytes of config.json or an index read at most


def _json_file(path: str, what: str) -> dict[str, Any]:
    with open(path, "rb") as f:
        raw = f.read(_MAX_JSON + 1)
    if len(raw) > _MAX_JSON:
        FILE.fail(f"{what} is larger than {_MAX_JSON} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        FILE.fail(f"{what} is not UTF-8: {exc}")
    return json_object(text, what)


def bitnet_settings(config: Mapping[str, Any], where: str = CONFIG) -> dict[str, Any]:
    """The checked ``quantization_config`` of a bitnet ``config``, transformers' defaults filled.

    FormatError for a config that is not a bitnet one or holds keys of the wrong type.
    """
    q = field(FILE, dict(config), "quantization_config", dict, where)
    where = f"{where}: quantization_config"
    if field(FILE, q, "quant_method", str, where) != "bitnet":
        FILE.fail(f"{where}: quant_method is {q['quant_method']!r:.60}, not 'bitnet'")
    out = {"linear_class": "bitlinear", "quantization_mode": "offline", "use_rms_norm": False,
           "rms_norm_eps": 1e-6, "modules_to_not_convert": None, **q}
    for key, kinds in (("linear_class", str), ("quantization_mode", str),
                       ("use_rms_norm", bool), ("rms_norm_eps", (float, int, type(None))),
                       ("modules_to_not_convert", (list, type(None)))):
        field(FILE, out, key, kinds, where)
    if out["linear_class"] not in LINEAR_CLASSES:
        FILE.fail(f"{where}: linear_class is {out['linear_class']!r:.60}; transformers takes "
                  f"{' or '.join(map(repr, LINEAR_CLASSES))}")
    if out["quantization_mode"] not in ("offline", "online"):
        FILE.fail(f"{where}: quantization_mode is {out['quantization_mode']!r:.60}; "
                  "transformers takes 'offline' or 'online'")
    skip = out["modules_to_not_convert"]
    if skip is not None and not all(isinstance(s, str) for s in skip):
        FILE.fail(f"{where}: modules_to_not_convert must be a list of str, got {skip!r:.60}")
    return out


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A model directory's ``config.json``, checked as a bitnet one (FormatError otherwise)."""
    file = os.path.join(path, CONFIG)
    if not os.path.isfile(file):
        FILE.fail(f"{os.fspath(path)!r} has no {CONFIG}: not a Hugging Face model directory")
    config = _json_file(file, f"{file!r}")
    bitnet_settings(config, repr(file))
    return config


def _shard_name(name: Any, where: str) -> str:
    if (not isinstance(name, str) or not name.endswith(".safetensors") or name.startswith(".")
            or os.path.basename(name) != name or "\\" in name or "\x00" in name):
        FILE.fail(f"{where}: the shard name {name!r:.80} is not a file name ending in "
                  ".safetensors in the model directory")
    return name


def _shards(path: str) -> dict[str, list[str] | None]:
    """Each shard file and the tensors the index puts there (None: no index, one file)."""
    index = os.path.join(path, INDEX)
    if not os.path.isfile(index):
        if os.path.isfile(os.path.join(path, SINGLE)):
            return {SINGLE: None}
        FILE.fail(f"{path!r} has neither {SINGLE} nor {INDEX}")
    where = repr(index)
    weight_map = field(FILE, _json_file(index, where), "weight_map", dict, where)
    if not weight_map:
        FILE.fail(f"{where}: its weight_map names no tensors")
    shards: dict[str, list[str] | None] = {}
    for tensor, shard in weight_map.items():
        shards.setdefault(_shard_name(shard, where), []).append(tensor)  # type: ignore[union-attr]
    for shard in shards:
        if not os.path.isfile(os.path.join(path, shard)):
            FILE.fail(f"{where} names the shard {shard!r}, which is not in {path!r}")
    return shards


def _read_tensors(path: str, max_bytes: int | None, bfloat16: str) -> SafetensorsFile:
    out = SafetensorsFile()
    for shard, names in _shards(path).items():
        f = read_safetensors(os.path.join(path, shard), max_bytes=max_bytes,
                             bfloat16=bfloat16)  # type: ignore[arg-type]
        if names is not None and set(names) != set(f):
            extra = sorted(set(f) - set(names))[:3]
            missing = sorted(set(names) - set(f))[:3]
            FILE.fail(f"shard {shard!r} does not hold the tensors {INDEX} gives it: "
                      + (f"missing {missing}" if missing else f"not in the index {extra}"))
        for name, value in f.items():
            if name in out:
                FILE.fail(f"tensor {name!r} is in two shards")
            out[name] = value
        out.dtypes.update(f.dtypes)
        out.metadata.update(f.metadata)
    return out


def _online_ternary(w: np.ndarray) -> TernaryTensor:
    """Float weights quantized as by ``WeightQuant``: float32 mean |w|, round(w / mean), clamp."""
    w = np.asarray(w, np.float32)
    mean = np.maximum(np.abs(w).mean(dtype=np.float32), np.float32(1e-5))
    inverse = np.float32(1) / mean
    trits = np.clip(np.round(w * inverse), -1, 1).astype(np.int8)
    return TernaryTensor(pack(trits), np.array(mean, np.float32))


def _offline_ternary(name: str, weight: Any, scale: Any, linear_class: str) -> TernaryTensor:
    if weight.dtype == np.uint8:
        return from_hf_bitnet(weight, scale, linear_class=linear_class)
    values = np.asarray(weight)  # AutoBitLinear's unpacked trits, in the model's dtype
    if values.dtype.kind != "f" or values.ndim != 2:
        raise TypeError(f"a {values.dtype} weight of shape {values.shape}: bitnet weights are "
                        "packed uint8 (out / 4, in) or trits (out, in) in a float dtype")
    if not np.isin(values, (-1.0, 0.0, 1.0)).all():
        bad = np.unravel_index(int(np.flatnonzero(~np.isin(values, (-1.0, 0.0, 1.0)))[0]),
                               values.shape)
        FILE.fail(f"tensor {name!r}[{bad[0]}, {bad[1]}] = {values[bad]} is not a trit")
    return TernaryTensor(pack(values.astype(np.int8)),
                         np.array(decode_scale(scale, linear_class), np.float32))


def _check_projection(name: str, dtype: str | None, scale: Any, linear_class: str) -> None:
    """FormatError for a projection whose stored dtype or ``weight_scale`` cannot be read.

    With a scale: packed ``U8`` or trits in a float dtype; without (online mode):
    float master weights. Checked from the header (the scale's one value read), so
    that neither path reads other bytes as weights and a streamed write fails before
    its first byte.
    """
    floats = ("F16", "BF16", "F32", "F64")
    if scale is None and dtype not in floats:
        FILE.fail(f"tensor {name!r}: {dtype} values without a weight_scale; an online-mode "
                  f"projection holds float master weights ({', '.join(floats)})")
    if scale is not None:
        if dtype not in ("U8", *floats):
            FILE.fail(f"tensor {name!r}: {dtype} values: bitnet weights are packed U8 "
                      "(out / 4, in) or trits in a float dtype")
        try:
            decode_scale(scale, linear_class)
        except (TritnumError, TypeError, ValueError) as exc:
            FILE.fail(f"tensor {name!r}: {exc}")


def _lazy(name: str, stored: np.ndarray,
          load: Callable[[], TernaryTensor]) -> LazyTernary | TernaryTensor:
    """A projection read by ``load`` from ``stored`` when it is wanted, then its pages let go.

    Its shape comes from ``stored``'s: ``(4 rows, in)`` of transformers' packed
    ``uint8`` (out / 4, in), else its own. One that is not 2-D is read now (packed
    or trits: refused, by name; online float weights of any shape are quantized).
    """
    def read() -> TernaryTensor:
        check_mapped(stored, name)  # a shard cut short since opened: an error, not SIGBUS
        try:
            tensor = load()
        except (TritnumError, TypeError, ValueError) as exc:
            FILE.fail(f"tensor {name!r}: {exc}")
        drop_view(stored)
        return tensor

    if stored.ndim != 2:
        return read()
    rows = stored.shape[0] * (4 if stored.dtype == np.uint8 else 1)
    return LazyTernary((rows, stored.shape[1]), read)


def _skipped(name: str, skip: list[str] | None) -> bool:
    module = name[:-len(_WEIGHT)]
    return any(module == s or module.endswith("." + s) or module.startswith(s + ".")
               for s in (["lm_head"] if skip is None else skip))


def read_hf_bitnet(path: str | os.PathLike[str], *, max_bytes: int | None = None,
                   bfloat16: Literal["float32", "bits"] = "float32"
                   ) -> tuple[SafetensorsFile, dict[str, Any]]:
    """Read a Hugging Face transformers ``bitnet`` model directory.

    Each projection becomes a :class:`~tritnum.TernaryTensor` (its exact trits and
    scale, one per tensor, through :func:`~tritnum.io.from_hf_bitnet`), named as
    its weight (``model.layers.0.self_attn.q_proj.weight``); its ``weight_scale``
    is folded in and not returned. A bias of an ``"autobitlinear"`` projection
    comes back as the bias the layer adds (the stored one times the scale).
    Everything else (embeddings, norms, ``lm_head``) comes back as arrays, bfloat16
    as float32 exactly (or as its bits), its dtype kept in ``dtypes``. An online-mode checkpoint
    (float master weights) is quantized on read as transformers' ``WeightQuant``
    does: the same trits, the scale (mean ``|w|``) within float32 rounding (torch
    sums in its own order).

    Parameters
    ----------
    path : path-like
        The directory: ``config.json`` and ``model.safetensors``, or shards with
        ``model.safetensors.index.json``.
    max_bytes : int, optional
        The most bytes one safetensors file may hold; by default no limit.
    bfloat16 : {"float32", "bits"}
        bfloat16 arrays as float32 copies (the default), or as read-only uint16
        views of their bits in the memory-mapped files (nothing copied; what
        :func:`write_hf_bitnet` and :func:`~tritnum.io.convert` pass on).

    Returns
    -------
    tensors : SafetensorsFile
        The tensors by name, in file order, with ``dtypes`` (each plain tensor's
        stored dtype).
    config : dict
        ``config.json``, as it is.

    Raises
    ------
    FormatError
        A directory without ``config.json`` or weights; a config that is not a
        bitnet one, or whose ``quantization_config`` keys have the wrong types; an
        index that is not a JSON object of shard names, names a missing shard, or
        disagrees with a shard's tensors; a corrupt safetensors file (offsets past
        its end, ...); a ``weight_scale`` without its weight, or not one positive
        value; packed weights with a code 3 or of the wrong dtype; an online-mode
        projection that is not float. The message names the file or tensor.
    OSError
        The directory or a file cannot be opened.

    Examples
    --------
    >>> import json, os, tempfile, numpy as np, tritnum as tn
    >>> from safetensors.numpy import save_file
    >>> d = tempfile.mkdtemp()
    >>> config = {"model_type": "bitnet", "quantization_config": {
    ...     "quant_method": "bitnet", "linear_class": "autobitlinear"}}
    >>> with open(os.path.join(d, "config.json"), "w") as f:
    ...     json.dump(config, f)
    >>> packed = np.array([[0b10_01_00_10, 0b00_00_01_01]], np.uint8)
    >>> save_file({"q_proj.weight": packed, "q_proj.weight_scale": np.array([0.5], np.float32),
    ...            "norm.weight": np.ones(2, np.float32)}, os.path.join(d, "model.safetensors"))
    >>> tensors, config = tn.io.read_hf_bitnet(d)
    >>> tensors["q_proj.weight"]
    TernaryTensor(shape=(4, 2), format='2bit', group_size=None, 8.0 bits/weight, 8 bytes)
    >>> tn.unpack(tensors["q_proj.weight"].packed)[:, 0], float(tensors["q_proj.weight"].scales)
    (array([ 1, -1,  0,  1], dtype=int8), 0.5)
    """
    tensors, config = open_hf_bitnet(path, max_bytes=max_bytes, bfloat16=bfloat16)
    for name, value in tensors.items():
        if isinstance(value, LazyTernary):
            tensors[name] = value.load()
    return tensors, config


def open_hf_bitnet(path: str | os.PathLike[str], *, max_bytes: int | None = None,
                   bfloat16: Literal["float32", "bits"] = "float32"
                   ) -> tuple[SafetensorsFile, dict[str, Any]]:
    """:func:`read_hf_bitnet`, each projection a :class:`~.gguf.model.LazyTernary`.

    What the config, the index and the safetensors headers say is checked now; a
    projection is decoded (and its trits checked) when it is loaded, then the pages
    of its mapped bytes are let go, so a writer holds one at a time.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        if not os.path.exists(path):
            raise FileNotFoundError(f"no such model directory: {path!r}")
        raise NotADirectoryError(f"{path!r} is not a directory (a Hugging Face model is a "
                                 "directory with config.json and safetensors files)")
    config = read_config(path)
    settings = bitnet_settings(config)
    linear_class = settings["linear_class"]
    choice(bfloat16, "bfloat16", ("float32", "bits"))
    raw = _read_tensors(path, max_bytes, "bits")

    def floats(name: str) -> Any:
        value = raw[name]
        bits = raw.dtypes.get(name) == "BF16" and value.dtype == np.uint16
        return bfloat16_to_float32(value) if bits else value
    out = SafetensorsFile(metadata=raw.metadata)
    for name in raw:
        if name.endswith(_SCALE) and name[:-len(_SCALE)] + _WEIGHT not in raw:
            FILE.fail(f"tensor {name!r} has no weight {name[:-len(_SCALE)] + _WEIGHT!r}")
    online = settings["quantization_mode"] == "online"
    for name, value in raw.items():
        if name.endswith(_SCALE):
            continue
        scale = raw.get(name[:-len(_WEIGHT)] + _SCALE) if name.endswith(_WEIGHT) else None
        projection = scale is not None or (online and name.endswith(_PROJECTION) and not _skipped(
            name, settings["modules_to_not_convert"]))
        if projection:  # what the header says, checked before any projection is decoded
            _check_projection(name, raw.dtypes.get(name), scale, linear_class)
        if scale is not None:
            out[name] = _lazy(name, value, partial(
                lambda n, s: _offline_ternary(n, floats(n), s, linear_class), name, scale))
        elif projection:
            out[name] = _lazy(name, value, partial(lambda n: _online_ternary(floats(n)), name))
        else:
            out[name] = floats(name) if bfloat16 == "float32" else value
            out.dtypes[name] = raw.dtypes[name]
    if linear_class == "autobitlinear":
        for name in list(out):
            weight = out.get(name[:-len(_BIAS)] + _WEIGHT) if name.endswith(_BIAS) else None
            if isinstance(weight, LazyTernary) and name[:-len(_BIAS)] + _SCALE in raw:
                try:  # from the scale: the weight (packed or trits) is not decoded
                    out[name] = real_bias(floats(name), raw[name[:-len(_BIAS)] + _SCALE],
                                          linear_class, weight.shape[0])
                except (TritnumError, TypeError, ValueError) as exc:
                    FILE.fail(f"tensor {name!r}: {exc}")
                out.dtypes[name] = "F32"
    return out, config


def _scale_dtype(config: Mapping[str, Any], scale_dtype: str | None) -> str:
    if scale_dtype is not None:
        if scale_dtype not in SCALE_DTYPES:
            raise FormatError(f"scale_dtype must be one of {', '.join(SCALE_DTYPES)}, "
                              f"got {scale_dtype!r}")
        return scale_dtype
    dtype = config.get("dtype", config.get("torch_dtype"))
    return dtype if dtype in SCALE_DTYPES else "bfloat16"


def _stored(name: str, value: Any, dtypes: Mapping[str, str]) -> tuple[Any, str | None]:
    """A plain value and the safetensors dtype to store it as (None: its own)."""
    if not is_array(value):
        raise TypeError(f"tensor {name!r} is a {type(value).__name__}; write_hf_bitnet takes "
                        "TernaryTensors (the projections) and arrays")
    return value, dtypes.get(name)


def _scale_entry(scale: np.ndarray) -> tuple[np.ndarray, str | None]:
    """A ``weight_scale`` as to_hf_bitnet gives it, ready for write_safetensors."""
    return scale, "BF16" if scale.dtype == np.uint16 else None  # uint16: bfloat16 bits


def _hf_tensors(tensors: Mapping[str, Any], linear_class: str, scale_dtype: str,
                requantize: bool) -> dict[str, tuple[Any, str | None]]:
    dtypes = getattr(tensors, "dtypes", {})
    out: dict[str, tuple[Any, str | None]] = {}
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, got {name!r}")
        if isinstance(value, TernaryTensor):
            if not name.endswith(_WEIGHT):
                raise ValueError(f"ternary tensor {name!r}: a projection's weight is named "
                                 "'<module>.weight'")
            bias_name = name[:-len(_WEIGHT)] + _BIAS
            bias = tensors.get(bias_name) if linear_class == "autobitlinear" else None
            try:
                parts = to_hf_bitnet(value, linear_class=linear_class,  # type: ignore[arg-type]
                                     scale_dtype=scale_dtype,  # type: ignore[arg-type]
                                     requantize=requantize, bias=bias)
            except TritnumError as exc:
                raise type(exc)(f"tensor {name!r}: {exc}") from exc  # type: ignore[call-arg]
            out[name] = (parts[0], None)
            out[name[:-len(_WEIGHT)] + _SCALE] = _scale_entry(parts[1])
            if bias is not None:
                out[bias_name] = (parts[2], None)
        elif name.endswith(_SCALE) and isinstance(tensors.get(name[:-len(_SCALE)] + _WEIGHT),
                                                  TernaryTensor):
            raise ValueError(f"tensor {name!r}: the scale of a TernaryTensor is its own; "
                             "leave the weight_scale out")
        elif name not in out:  # not a bias written with its weight
            out[name] = _stored(name, value, dtypes)
    return out


def _shard_groups(sizes: dict[str, int], max_shard_size: int | None) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    used = 0
    for name, n in sizes.items():
        if max_shard_size is not None and groups[-1] and used + n > max_shard_size:
            groups.append([])
            used = 0
        groups[-1].append(name)
        used += n
    return groups


def _nbytes(value: Any) -> int:
    a, _ = plain_array(value, "tensor")
    return int(a.nbytes)


def _write_dir(tmp: str, entries: dict[str, tuple[Any, str | None]], config: dict[str, Any],
               max_shard_size: int | None) -> None:
    sizes = {name: _nbytes(value) for name, (value, _) in entries.items()}
    groups = _shard_groups(sizes, max_shard_size)
    names = [SINGLE] if len(groups) == 1 else [
        f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    for shard, group in zip(names, groups, strict=True):
        write_safetensors(os.path.join(tmp, shard), {n: entries[n][0] for n in group},
                          {"format": "pt"}, dtypes={n: entries[n][1] for n in group
                                                    if entries[n][1] is not None})
    if len(groups) > 1:
        index = {"metadata": {"total_size": sum(sizes.values())},
                 "weight_map": {n: shard for shard, group in zip(names, groups, strict=True)
                                for n in group}}
        with open(os.path.join(tmp, INDEX), "w", encoding="utf-8") as f:
            json.dump(index, f, indent=2)
    with open(os.path.join(tmp, CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def write_hf_bitnet(path: str | os.PathLike[str], tensors: Mapping[str, Any],
                    config: Mapping[str, Any], *, linear_class: str | None = None,
                    scale_dtype: str | None = None, max_shard_size: int | None = None,
                    requantize: bool = False) -> None:
    """Write a Hugging Face transformers ``bitnet`` model directory (offline mode, packed).

    :class:`~tritnum.TernaryTensor` values named ``<module>.weight`` become
    transformers' packed weight and ``<module>.weight_scale``
    (:func:`~tritnum.io.to_hf_bitnet`); arrays are written as they are (the dtypes
    of a :class:`~tritnum.io.SafetensorsFile` from :func:`read_hf_bitnet` kept, so
    bfloat16 stays bfloat16). ``config.json`` is ``config`` with its
    ``quantization_config`` set to offline mode. ``BitNetForCausalLM.from_pretrained``
    loads the directory (transformers' bitnet quantizer also needs ``accelerate``).

    Parameters
    ----------
    path : path-like
        The directory to create; it must not exist, or be empty. The files are
        written into a temporary directory beside it, renamed to ``path`` once
        complete: an error leaves nothing behind.
    tensors : mapping of str to TernaryTensor or array
        The model's tensors by transformers' names.
    config : mapping
        The model's config (``config.json`` as a dict); it needs no
        ``quantization_config`` if ``linear_class`` is given.
    linear_class : {"bitlinear", "autobitlinear"}, optional
        The convention of the scales written; default the config's, else
        ``"autobitlinear"`` (microsoft/bitnet-b1.58-2B-4T's).
    scale_dtype : {"bfloat16", "float16", "float32"}, optional
        The dtype of the ``weight_scale`` tensors; default the config's ``dtype``
        (or ``torch_dtype``), else bfloat16.
    max_shard_size : int, optional
        Split the tensors into shards of at most this many bytes (a tensor larger
        than that has a shard of its own), with ``model.safetensors.index.json``;
        default one ``model.safetensors``.
    requantize : bool
        Round scales that ``scale_dtype`` cannot hold exactly (see
        :func:`~tritnum.io.to_hf_bitnet`); without it they raise FormatError.

    Raises
    ------
    FormatError
        A config that is not a mapping, a ``quantization_config`` that is not a
        bitnet one, a scale that ``scale_dtype`` cannot hold (the message names the
        tensor), an unknown ``scale_dtype``.
    ShapeMismatchError
        A ternary weight whose output rows are not a multiple of 4.
    TypeError
        A value that is neither a TernaryTensor nor an array.
    ValueError
        A ternary tensor not named ``<module>.weight``, or a ``weight_scale`` given
        next to its TernaryTensor.
    FileExistsError
        ``path`` exists and is not an empty directory.

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> d = os.path.join(tempfile.mkdtemp(), "model")
    >>> w = tn.TernaryTensor(tn.pack(np.array([[1, 0], [-1, 0], [0, -1], [1, -1]])),
    ...                      np.float32(0.5))
    >>> tn.io.write_hf_bitnet(d, {"q_proj.weight": w}, {"model_type": "bitnet"})
    >>> sorted(os.listdir(d))
    ['config.json', 'model.safetensors']
    >>> tensors, config = tn.io.read_hf_bitnet(d)
    >>> config["quantization_config"]
    {'quant_method': 'bitnet', 'linear_class': 'autobitlinear', 'quantization_mode': 'offline'}
    >>> tensors["q_proj.weight"].packed == w.packed
    True
    """
    if not isinstance(config, Mapping):
        raise FormatError(f"config must be a mapping (config.json as a dict), got "
                          f"{type(config).__name__}")
    if not isinstance(tensors, Mapping):
        raise TypeError(f"write_hf_bitnet takes a mapping of names to TernaryTensors and "
                        f"arrays, got {type(tensors).__name__}")
    config = dict(config)
    q = dict(config.get("quantization_config") or {"quant_method": "bitnet"})
    if linear_class is not None:
        q["linear_class"] = linear_class
    q.setdefault("linear_class", "autobitlinear")
    q["quantization_mode"] = "offline"
    config["quantization_config"] = q
    settings = bitnet_settings(config, "config")
    entries = _hf_tensors(tensors, settings["linear_class"], _scale_dtype(config, scale_dtype),
                          requantize)
    path = os.fspath(path)
    if os.path.exists(path) and not (os.path.isdir(path) and not os.listdir(path)):
        raise FileExistsError(f"{path!r} exists: write_hf_bitnet writes a new (or empty) "
                              "directory")
    parent = os.path.dirname(os.path.abspath(path))
    tmp = tempfile.mkdtemp(prefix=".tritnum-", dir=parent)
    try:
        umask = os.umask(0o22)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0o700 would stay after the rename
        _write_dir(tmp, entries, config, max_shard_size)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
