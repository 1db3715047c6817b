"""Conversions between Hugging Face ``bitnet`` checkpoints, tritnum's files and GGUF.

:func:`convert` picks the formats from the paths (a directory is a Hugging Face
model, ``.safetensors`` and ``.npz`` are tritnum's own files, ``.gguf`` is
llama.cpp's); :func:`hf_bitnet_to_gguf` writes the BitNet architecture that computes
the model (or llama.cpp's ``llama`` for a Llama in the ``bitnet`` format). Each
projection goes through a :class:`~tritnum.TernaryTensor`: its exact trits and the
one scale its layer multiplies by, so a scale convention (``weight_scale`` or its
reciprocal) is applied once, on reading the checkpoint.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._validate import choice
from ..errors import FormatError
from ..typing import I2SLayout
from .arrays import bfloat16_to_float32
from .files import load, save
from .gguf.file import write_gguf
from .gguf.hf_models import (
    bitnet_arch,
    check_shapes,
    gguf_metadata,
    gguf_names,
    gguf_qtypes,
    model_name,
    rope_rows,
)
from .gguf.model import GGUFBlocks, GGUFReport
from .gguf.vocab import TOKENIZER_FILE, tokenizer_metadata
from .hf_checkpoint import (
    CONFIG,
    bitnet_settings,
    open_hf_bitnet,
    read_hf_bitnet,
    write_hf_bitnet,
)
from .safetensors_file import read_safetensors, write_safetensors
from .safetensors_header import json_object

__all__ = ["CONFIG_KEY", "convert", "hf_bitnet_to_gguf", "llama_to_gguf"]

#: The safetensors metadata key that keeps a model's config.json in tritnum's own file.
CONFIG_KEY = "hf_bitnet.config"
_TERNARY_QTYPES = ("TQ1_0", "TQ2_0", "I2_S")


def _tokenizer_dir(tokenizer: Any, default: Any) -> str | None:
    """The directory whose tokenizer goes into the file, or None (with a warning if unasked).

    ``tokenizer``: True (``default``'s, a warning where it has none), False (none)
    or a directory (FormatError where it has no tokenizer).
    """
    if tokenizer is False or (tokenizer is True and default is None):
        if tokenizer is True:
            warnings.warn("no tokenizer given: the GGUF file has none, and llama.cpp cannot "
                          "run it on text (tokenizer= names a model directory with "
                          f"{TOKENIZER_FILE}; tokenizer=False says none is wanted)",
                          stacklevel=3)
        return None
    path = os.fspath(default if tokenizer is True else tokenizer)
    if os.path.isfile(os.path.join(path, TOKENIZER_FILE)):
        return path
    if tokenizer is not True:
        raise FormatError(f"tokenizer={path!r} has no {TOKENIZER_FILE}")
    warnings.warn(f"{path!r} has no {TOKENIZER_FILE}: the GGUF file has no tokenizer, and "
                  "llama.cpp cannot run it on text (tokenizer= names a directory with one; "
                  "tokenizer=False says none is wanted)", stacklevel=3)
    return None


def _to_gguf(dst: str | os.PathLike[str], tensors: Mapping[str, Any], config: Mapping[str, Any],
             name: str, qtype: str, layout: str, requantize: bool,
             progress: bool | None, tokenizer: str | None, arch: str | None = None
             ) -> GGUFReport:
    qtype = choice(qtype, "qtype", _TERNARY_QTYPES, FormatError)
    arch = arch or bitnet_arch(config)
    metadata = gguf_metadata(config, qtype, name, arch)
    names = gguf_names(list(tensors), config, arch)
    if tokenizer is not None:
        embed = next((tensors[n] for n, g in names.items() if g == "token_embd.weight"), None)
        rows = None if embed is None else int(embed.shape[0])
        if rows is not None and rows != config["vocab_size"]:
            raise FormatError(f"vocab_size {config['vocab_size']} (config.json) is not the "
                              f"token embedding's {rows} rows: llama.cpp takes a token per row")
        metadata.update(tokenizer_metadata(tokenizer, config["vocab_size"], arch))
    check_shapes({names[n]: tuple(v.shape) for n, v in tensors.items()}, config)
    renamed = {names[n]: _gguf_value(n, v, getattr(tensors, "dtypes", {}).get(n))
               for n, v in tensors.items()}
    if arch == "llama":  # llama.cpp rotates adjacent pairs: permute the rows as LlamaModel does
        heads = config["num_attention_heads"]
        kv_heads = config.get("num_key_value_heads") or heads
        for n in renamed:
            if n.endswith((".attn_q.weight", ".attn_k.weight")):
                renamed[n] = rope_rows(renamed[n], heads if ".attn_q." in n else kv_heads)
    return write_gguf(dst, renamed, metadata=metadata, qtype=gguf_qtypes(qtype),
                      layout=layout, requantize=requantize, progress=progress)


def _bfloat16(value: Any, dtype: str | None) -> Any:
    """bfloat16 bits as GGUF BF16 bytes (a view, not a copy), 1-D ones (norms) as float32."""
    if dtype != "BF16" or getattr(value, "dtype", None) != np.uint16:
        return value
    if value.ndim == 1:
        return bfloat16_to_float32(value)
    return GGUFBlocks(value.reshape(-1).view(np.uint8), "BF16", value.shape)


def _gguf_value(name: str, value: Any, dtype: str | None) -> Any:
    """``value`` as :func:`write_gguf` takes it; FormatError for an array of no float type."""
    value = _bfloat16(value, dtype)
    if isinstance(value, np.ndarray) and value.dtype.kind != "f":
        raise FormatError(f"tensor {name!r} holds {dtype or value.dtype} values: a GGUF model "
                          "takes float tensors (F32, F16, BF16) beside the ternary projections")
    return value


def _float_bfloat16(tensors: Mapping[str, Any]) -> dict[str, Any]:
    """``tensors`` with bfloat16 bits as float32 (exact), for files that hold no bfloat16."""
    dtypes = getattr(tensors, "dtypes", {})
    return {n: bfloat16_to_float32(v) if dtypes.get(n) == "BF16" and v.dtype == np.uint16
            else v for n, v in tensors.items()}


def hf_bitnet_to_gguf(src: str | os.PathLike[str], dst: str | os.PathLike[str], *,
                      qtype: str = "TQ2_0", layout: I2SLayout = "x86", requantize: bool = False,
                      tokenizer: bool | str | os.PathLike[str] = True,
                      progress: bool | None = None) -> GGUFReport:
    """Convert a Hugging Face ``bitnet`` model directory to a GGUF file for llama.cpp.

    The file has the architecture that computes the model: for relu² (transformers'
    default, microsoft/bitnet-b1.58-2B-4T) bitnet.cpp's ``bitnet-b1.58``, which
    mainline llama.cpp does not load; for SiLU llama.cpp's ``bitnet``, whose graph
    computes SiLU (see ``tritnum.io.gguf.hf_models``); for a Llama (``model_type``
    "llama", HF1BitLLM's) llama.cpp's ``llama``, its query and key rows permuted as
    :func:`llama_to_gguf` does: tensor names from the
    ``gguf`` package's ``TensorNameMap``, the hyperparameters of ``config.json``
    under its ``Keys``, the projections in ``qtype`` with their exact trits and
    scale, the token embeddings in their stored dtype (bfloat16 kept), the norms in
    F32, and the tokenizer as
    llama.cpp's ``tokenizer.ggml.*`` keys (byte-level BPE, as the 2B-4T model's; see
    ``tritnum.io.gguf.vocab``). The checkpoint is memory-mapped and streamed: each
    projection is decoded when its bytes are due and let go once written, so about
    one tensor is in memory at a time. The file is written beside ``dst`` and
    renamed when complete: an error (a code 3 in a packed weight found on the way)
    leaves no file.

    Parameters
    ----------
    src : path-like
        The model directory (as :func:`~tritnum.io.read_hf_bitnet` reads it).
    dst : path-like
        The GGUF file to write.
    qtype : {"TQ2_0", "TQ1_0", "I2_S"}
        The projections' type: llama.cpp reads TQ1_0 and TQ2_0, bitnet.cpp I2_S.
    layout : {"x86", "x86-interleaved", "arm"}
        I2_S's byte layout, for the bitnet.cpp build that reads the file.
    requantize : bool
        Re-quantize tensors whose scales ``qtype`` cannot hold (see
        :func:`~tritnum.io.write_gguf`); a projection has one scale, which TQ1_0 and
        TQ2_0 keep rounded to float16 (their block scale) and I2_S exactly.
    tokenizer : bool or path-like
        True: the tokenizer of ``src`` (``tokenizer.json``; without one the file has
        no tokenizer, with a warning); a directory: its tokenizer; False: none.
    progress : bool, optional
        Show a progress bar; by default only for many tensors.

    Returns
    -------
    GGUFReport
        Each tensor's name, type and size.

    Raises
    ------
    FormatError
        What :func:`~tritnum.io.read_hf_bitnet` refuses; a tensor or setting
        the architecture has no place for (an untied ``lm_head``, ``use_rms_norm``,
        an activation other than relu2 and silu, RoPE scaling), named; a
        missing or ill-typed hyperparameter (or one GGUF cannot hold: sizes past
        uint32, non-finite constants); a tensor whose shape is not the one the
        config gives; a shard cut short while it is converted, the tensor named;
        a tokenizer file that cannot be read,
        is not byte-level BPE, or whose pre-tokenizer llama.cpp has no name for; a
        ``tokenizer`` directory without ``tokenizer.json``.
    ShapeMismatchError
        A projection whose rows ``qtype`` cannot hold (TQ: a multiple of 256).
    ImportError
        A tokenizer to write without transformers installed (it loads the
        tokenizer, as in llama.cpp's converter).
    IsADirectoryError
        ``dst`` is a directory (before anything is read or written).

    Warns
    -----
    UserWarning
        ``src`` has no tokenizer (and ``tokenizer`` is True).

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> d = tempfile.mkdtemp()
    >>> config = {"model_type": "bitnet", "vocab_size": 8, "hidden_size": 256,
    ...           "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 2,
    ...           "max_position_embeddings": 64, "tie_word_embeddings": True}
    >>> rng = np.random.default_rng(0)
    >>> w = tn.TernaryTensor(tn.pack(rng.integers(-1, 2, (256, 256))), np.float32(0.25))
    >>> tensors = {"model.embed_tokens.weight": np.ones((8, 256), np.float32),
    ...            "model.layers.0.self_attn.q_proj.weight": w,
    ...            "model.norm.weight": np.ones(256, np.float32)}
    >>> tn.io.write_hf_bitnet(os.path.join(d, "hf"), tensors, config)
    >>> report = tn.io.hf_bitnet_to_gguf(os.path.join(d, "hf"), os.path.join(d, "m.gguf"),
    ...                                  tokenizer=False)  # this model has no tokenizer
    >>> print(report)  # doctest: +ELLIPSIS
    GGUFReport('...m.gguf', 26912 bytes, 3 tensors: 2 F32, 1 TQ2_0)
      token_embd.weight  [8x256]  float32 -> F32  8192 bytes
      output_norm.weight  [256]  float32 -> F32  1024 bytes
      blk.0.attn_q.weight  [256x256]  ternary -> TQ2_0  16896 bytes
    """
    tensors, config = open_hf_bitnet(src, bfloat16="bits")
    return _to_gguf(dst, tensors, config, model_name(src, config), qtype, layout, requantize,
                    progress, _tokenizer_dir(tokenizer, src))


def llama_to_gguf(dst: str | os.PathLike[str], tensors: Mapping[str, Any],
                  config: Mapping[str, Any], *, qtype: str = "TQ2_0", layout: I2SLayout = "x86",
                  name: str = "tritnum", requantize: bool = False,
                  tokenizer: str | os.PathLike[str] | None = None,
                  progress: bool | None = None) -> GGUFReport:
    """Write a Llama model with ternary projections as a GGUF file of llama.cpp's ``llama``.

    For a model trained with :mod:`tritnum.torch` (``tritnum.torch.export`` of a
    converted ``LlamaForCausalLM``) or any tensors under transformers' Llama names:
    names from the ``gguf`` package's ``TensorNameMap``, hyperparameters from the
    config under its ``Keys``, and the rows of the query and key projections
    permuted as llama.cpp's ``LlamaModel.permute`` does (llama.cpp rotates
    adjacent pairs where transformers rotates halves; without it the file loads
    and computes wrong results). Float weights stay float (F32, F16 as stored).

    Parameters
    ----------
    dst : path-like
        The GGUF file to write (beside, then renamed).
    tensors : mapping of str to TernaryTensor or numpy.ndarray
        The model's tensors by transformers' Llama names (``model.embed_tokens.weight``,
        ``model.layers.0.self_attn.q_proj.weight``, ..., ``lm_head.weight``).
    config : mapping
        The model's config (``LlamaConfig.to_dict()``, or ``config.json``).
    qtype : {"TQ2_0", "TQ1_0", "I2_S"}
        The ternary projections' type.
    layout : {"x86", "x86-interleaved", "arm"}
        I2_S's byte layout.
    name : str
        ``general.name``.
    requantize : bool
        Re-quantize tensors whose scales ``qtype`` cannot hold (per-row scales into
        I2_S, groups finer than TQ's 256-value blocks); without it FormatError.
    tokenizer : path-like, optional
        A model directory whose tokenizer (``tokenizer.json``) goes into the file as
        llama.cpp's ``tokenizer.ggml.*`` keys (see ``tritnum.io.gguf.vocab``);
        without it the file has no tokenizer, and llama.cpp cannot run it on text.
    progress : bool, optional
        Show a progress bar; by default only for many tensors.

    Returns
    -------
    GGUFReport
        Each tensor's name, type and size.

    Raises
    ------
    FormatError
        A tensor with no place in llama.cpp's ``llama`` architecture (named); a
        missing or ill-typed hyperparameter, an activation other than SiLU, biases,
        RoPE scaling; scales ``qtype`` cannot hold (without ``requantize``); a
        ``tokenizer`` directory without ``tokenizer.json``, or a tokenizer
        :func:`hf_bitnet_to_gguf` refuses.
    ShapeMismatchError
        A projection whose rows ``qtype`` cannot hold (TQ: a multiple of 256).
    ImportError
        A tokenizer to write without transformers installed.

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> config = {"vocab_size": 8, "hidden_size": 256, "intermediate_size": 256,
    ...           "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
    ...           "max_position_embeddings": 64, "hidden_act": "silu"}
    >>> rng = np.random.default_rng(0)
    >>> q = tn.quantize(rng.standard_normal((256, 256)), axis=-1)
    >>> path = os.path.join(tempfile.mkdtemp(), "llama.gguf")
    >>> report = tn.io.llama_to_gguf(path, {"model.layers.0.self_attn.q_proj.weight": q}, config)
    >>> model = tn.io.read_gguf(path)
    >>> model.architecture, model.qtypes["blk.0.attn_q.weight"]
    ('llama', 'TQ2_0')
    >>> rows = [0, 64, 1, 65]  # head 0's first pairs: row i of each half, side by side
    >>> bool((model["blk.0.attn_q.weight"].packed.unpack()[:4] == q.packed.unpack()[rows]).all())
    True
    """
    if not isinstance(config, Mapping):
        raise FormatError(f"config must be a mapping, got {type(config).__name__}")
    return _to_gguf(dst, tensors, config, name, qtype, layout, requantize, progress,
                    _tokenizer_dir(tokenizer is not None and tokenizer, None), "llama")


def _config_of(config: Any) -> dict[str, Any]:
    if isinstance(config, Mapping):
        return dict(config)
    path = os.fspath(config)
    if os.path.isdir(path):
        path = os.path.join(path, CONFIG)
    with open(path, encoding="utf-8") as f:
        return json_object(f.read(), repr(path))


def _tritnum_file(src: str, config: Any) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """Tensors and config of tritnum's own file (``config`` first, else the file's own)."""
    if src.lower().endswith(".safetensors"):
        tensors: Any = read_safetensors(src, bfloat16="bits")
        own = tensors.metadata.get(CONFIG_KEY)
    else:
        tensors = load(src)
        own = None
        if not isinstance(tensors, dict):
            raise FormatError(f"{src!r} holds one {type(tensors).__name__}, not the tensors "
                              "of a model by name")
    if config is not None:
        return tensors, _config_of(config)
    if own is None:
        raise FormatError(f"{src!r} holds no model config (.npz files never do): give the "
                          "model's config.json (config=, or --config)")
    return tensors, json_object(own, f"{src!r}: metadata {CONFIG_KEY!r}")


def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str], *,
            config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
            qtype: str = "TQ2_0", layout: I2SLayout = "x86", linear_class: str | None = None,
            scale_dtype: str | None = None, max_shard_size: int | None = None,
            requantize: bool = False, tokenizer: bool | str | os.PathLike[str] = True,
            progress: bool | None = None) -> GGUFReport | None:
    """Convert a ternary model between Hugging Face ``bitnet``, tritnum's files and GGUF.

    The formats follow from the paths: a directory (or a path without one of the
    extensions below) is a Hugging Face model directory
    (:func:`~tritnum.io.read_hf_bitnet` / :func:`~tritnum.io.write_hf_bitnet`),
    ``.safetensors`` and ``.npz`` are tritnum's own files (:func:`tritnum.save`;
    a ``.safetensors`` keeps the model's ``config.json`` in its metadata, key
    ``hf_bitnet.config``), ``.gguf`` is a GGUF file of the BitNet architecture that
    computes the model, or llama.cpp's ``llama`` for a ``model_type`` "llama" config
    (a Llama trained with :mod:`tritnum.torch`; :func:`~tritnum.io.hf_bitnet_to_gguf`).
    The trits are exact in every direction, and so are the scales wherever the
    target holds them.

    Parameters
    ----------
    src : path-like
        A Hugging Face model directory, or a ``.safetensors`` / ``.npz`` file of
        tritnum's.
    dst : path-like
        A new directory, a ``.safetensors``, ``.npz`` or ``.gguf`` file.
    config : mapping or path-like, optional
        The model's config (a dict, a ``config.json`` or its directory) where
        ``src`` is tritnum's file: required for an ``.npz``, else the file's own.
    qtype : {"TQ2_0", "TQ1_0", "I2_S"}
        The projections' GGUF type (to ``.gguf`` only).
    layout : {"x86", "x86-interleaved", "arm"}
        I2_S's byte layout (to ``.gguf`` only).
    linear_class : {"bitlinear", "autobitlinear"}, optional
        The scale convention of a Hugging Face directory written; default the
        config's.
    scale_dtype : {"bfloat16", "float16", "float32"}, optional
        The ``weight_scale`` dtype of a Hugging Face directory written; default the
        config's ``dtype``.
    max_shard_size : int, optional
        Shard a Hugging Face directory written into files of at most this many bytes.
    requantize : bool
        Round scales the target cannot hold exactly; without it they raise
        FormatError.
    tokenizer : bool or path-like
        The tokenizer a GGUF file gets (see :func:`hf_bitnet_to_gguf`): True, that
        of the model directory (``src``, or the directory of a ``config`` path),
        with a warning where there is none; a directory, its tokenizer; False, none.
    progress : bool, optional
        Show a progress bar writing GGUF; by default only for many tensors.

    Returns
    -------
    GGUFReport or None
        The report of a GGUF file written, else None.

    Raises
    ------
    FormatError
        What the readers and writers named above refuse; a tritnum file without a
        config where one is needed; a tritnum source written to tritnum's format
        (nothing to convert).

    Warns
    -----
    UserWarning
        A GGUF file written without a tokenizer because the model directory has
        none (``tokenizer=True``).

    Examples
    --------
    >>> import os, tempfile, numpy as np, tritnum as tn
    >>> d = tempfile.mkdtemp()
    >>> w = tn.TernaryTensor(tn.pack(np.array([[1, 0], [-1, 0], [0, -1], [1, -1]])),
    ...                      np.float32(0.5))
    >>> tn.io.write_hf_bitnet(os.path.join(d, "hf"), {"q_proj.weight": w},
    ...                       {"model_type": "bitnet"})
    >>> tn.io.convert(os.path.join(d, "hf"), os.path.join(d, "model.safetensors"))
    >>> tn.load(os.path.join(d, "model.safetensors"))["q_proj.weight"].packed == w.packed
    True
    >>> tn.io.convert(os.path.join(d, "model.safetensors"), os.path.join(d, "back"),
    ...               linear_class="bitlinear")
    >>> tensors, config = tn.io.read_hf_bitnet(os.path.join(d, "back"))
    >>> config["quantization_config"]["linear_class"], float(tensors["q_proj.weight"].scales)
    ('bitlinear', 0.5)
    """
    src, dst = os.fspath(src), os.fspath(dst)
    kind = dst.lower().rsplit(".", 1)[-1] if "." in os.path.basename(dst) else ""
    if os.path.isdir(src):  # into GGUF, each projection read as it is written
        read = open_hf_bitnet if kind == "gguf" else read_hf_bitnet
        tensors, model_config = read(src, bfloat16="bits")
        name = model_name(src, model_config)
        if config is not None:
            model_config = _config_of(config)
    elif not os.path.exists(src):
        raise FileNotFoundError(f"no such file or model directory: {src!r}")
    else:
        if kind in ("safetensors", "npz"):
            raise FormatError(f"{src!r} and {dst!r} are both tritnum's own files: use "
                              "tn.load and tn.save")
        tensors, model_config = _tritnum_file(src, config)
        name = model_name(src, model_config)
    bitnet_settings({**model_config, "quantization_config": model_config.get(
        "quantization_config") or {"quant_method": "bitnet"}}, "config")
    if kind == "gguf":
        home = src if os.path.isdir(src) else None
        if home is None and config is not None and not isinstance(config, Mapping):
            home = os.fspath(config)
            home = home if os.path.isdir(home) else os.path.dirname(os.path.abspath(home))
        return _to_gguf(dst, tensors, model_config, name, qtype, layout, requantize, progress,
                        _tokenizer_dir(tokenizer, home))
    if kind == "safetensors":
        write_safetensors(dst, tensors, {"format": "pt", CONFIG_KEY: json.dumps(model_config)},
                          dtypes=getattr(tensors, "dtypes", None))
    elif kind == "npz":
        save(dst, _float_bfloat16(tensors))
    else:
        write_hf_bitnet(dst, tensors, model_config, linear_class=linear_class,
                        scale_dtype=scale_dtype, max_shard_size=max_shard_size,
                        requantize=requantize)
    return None

