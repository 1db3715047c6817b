"""A transformers ``bitnet`` model as a GGUF file of llama.cpp's ``bitnet`` architecture.

The tensor names come from the ``gguf`` package's own tables (``TensorNameMap`` of
``MODEL_ARCH.BITNET``, ``TENSOR_NAMES``), the metadata keys from its ``Keys``, the
hyperparameters from the model's ``config.json``, as llama.cpp's
``convert_hf_to_gguf.py`` (``BitnetModel``) writes them. The ternary projections
keep their exact trits and scale (the one transformers' layer multiplies by, the
convention of ``linear_class`` applied once, on reading); a tensor or a setting
llama.cpp's architecture has no place for is refused by name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...errors import FormatError
from ...quantize import TernaryTensor
from ..hf_checkpoint import bitnet_settings
from .model import GGUFBlocks
from .quantize import FILE_TYPES
from .values import GGUFValue

__all__ = ["gguf_metadata", "gguf_names", "gguf_qtypes", "model_name"]

ARCH = "bitnet"
# transformers' names of the two norms inside each block, which the gguf package's
# TensorNameMap (0.19) knows only under their older names (inner_attn_ln, ffn_layernorm)
_SUB_NORMS = {r"model\.layers\.(\d+)\.self_attn\.attn_sub_norm": "ATTN_SUB_NORM",
              r"model\.layers\.(\d+)\.mlp\.ffn_sub_norm": "FFN_SUB_NORM"}
_INTS = ("vocab_size", "max_position_embeddings", "hidden_size", "intermediate_size",
         "num_hidden_layers", "num_attention_heads")


def _gguf() -> Any:
    try:
        import gguf
    except ImportError:  # pragma: no cover - gguf is a dependency of tritnum
        from ..._extras import missing

        raise ImportError(missing("Naming GGUF tensors", "gguf")) from None
    return gguf


def _int(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise FormatError(f"config.json: {key} is {value!r:.60}, not an int > 0 (llama.cpp's "
                          f"bitnet architecture needs it)")
    return value


def _float(config: Mapping[str, Any], key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise FormatError(f"config.json: {key} is {value!r:.60}, not a number > 0")
    return float(value)


def _rope_theta(config: Mapping[str, Any]) -> float:
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(rope, Mapping):
        raise FormatError(f"config.json: rope_parameters is {rope!r:.60}, not an object")
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise FormatError(f"config.json: rope type {kind!r:.60}: llama.cpp's bitnet "
                          "architecture takes plain RoPE ('default') only")
    theta = rope.get("rope_theta", config.get("rope_theta", 500000.0))
    return _float(config, "rope_theta", theta)


def gguf_metadata(config: Mapping[str, Any], qtype: str, name: str) -> dict[str, GGUFValue]:
    """The GGUF metadata of a bitnet model of ``config`` whose projections are ``qtype``.

    FormatError for a hyperparameter that is missing or of the wrong type, or a
    setting llama.cpp's bitnet architecture cannot express.
    """
    keys = _gguf().Keys
    settings = bitnet_settings(config, "config.json")
    if settings["use_rms_norm"]:
        raise FormatError("config.json: quantization_config.use_rms_norm is true: llama.cpp's "
                          "bitnet architecture has no norm inside each projection")
    if config.get("hidden_act", "relu2") != "relu2":
        raise FormatError(f"config.json: hidden_act is {config.get('hidden_act')!r:.60}; "
                          "llama.cpp's bitnet architecture computes relu2")
    if config.get("attention_bias"):
        raise FormatError("config.json: attention_bias is true; llama.cpp's bitnet "
                          "architecture has no attention biases")
    n = {key: _int(config, key) for key in _INTS}
    heads = n["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    kv_heads = _int({"num_key_value_heads": kv_heads}, "num_key_value_heads")
    head_dim = config.get("head_dim") or n["hidden_size"] // heads
    if head_dim * heads != n["hidden_size"] or heads % kv_heads:
        raise FormatError(f"config.json: hidden_size {n['hidden_size']}, "
                          f"{heads} heads of {head_dim}, {kv_heads} key-value heads do not fit "
                          "llama.cpp's bitnet attention")
    eps = _float(config, "rms_norm_eps", config.get("rms_norm_eps", 1e-5))

    def u32(v: int) -> GGUFValue:
        return GGUFValue("uint32", v)

    def f32(v: float) -> GGUFValue:
        return GGUFValue("float32", v)

    def key(k: str) -> str:
        return k.format(arch=ARCH)

    return {
        keys.General.ARCHITECTURE: GGUFValue("string", ARCH),
        keys.General.NAME: GGUFValue("string", name),
        key(keys.LLM.VOCAB_SIZE): u32(n["vocab_size"]),
        key(keys.LLM.CONTEXT_LENGTH): u32(n["max_position_embeddings"]),
        key(keys.LLM.EMBEDDING_LENGTH): u32(n["hidden_size"]),
        key(keys.LLM.FEED_FORWARD_LENGTH): u32(n["intermediate_size"]),
        key(keys.LLM.BLOCK_COUNT): u32(n["num_hidden_layers"]),
        key(keys.Attention.HEAD_COUNT): u32(heads),
        key(keys.Attention.HEAD_COUNT_KV): u32(kv_heads),
        key(keys.Rope.FREQ_BASE): f32(_rope_theta(config)),
        key(keys.Attention.LAYERNORM_RMS_EPS): f32(eps),
        key(keys.Rope.DIMENSION_COUNT): u32(head_dim),
        key(keys.Rope.SCALING_TYPE): GGUFValue("string", "linear"),
        key(keys.Rope.SCALING_FACTOR): f32(1.0),
        keys.General.FILE_TYPE: u32(FILE_TYPES[qtype]),
    }


def gguf_names(names: list[str], config: Mapping[str, Any]) -> dict[str, str]:
    """GGUF names of transformers' bitnet tensors ``names``; FormatError naming the rest."""
    gguf = _gguf()
    blocks = _int(config, "num_hidden_layers")
    table = gguf.TensorNameMap(gguf.MODEL_ARCH.BITNET, blocks)
    out: dict[str, str] = {}
    refused = []
    for name in names:
        base, dot, suffix = name.rpartition(".")
        mapped = table.get_name(base) if dot else None
        for pattern, tensor in _SUB_NORMS.items():
            match = re.fullmatch(pattern, base)
            if mapped is None and match and int(match.group(1)) < blocks:
                kind = getattr(gguf.MODEL_TENSOR, tensor)
                mapped = gguf.TENSOR_NAMES[kind].format(bid=int(match.group(1)))
        if mapped is None or suffix != "weight":
            refused.append(name)
        else:
            out[name] = f"{mapped}.{suffix}"
    if refused:
        tied = " (llama.cpp's bitnet architecture multiplies by token_embd for the output: " \
               "it takes models with tie_word_embeddings)" if "lm_head.weight" in refused else ""
        raise FormatError(f"{len(refused)} tensors have no place in llama.cpp's bitnet "
                          f"architecture: {', '.join(refused[:6])}"
                          + (", ..." if len(refused) > 6 else "") + tied)
    return out


def gguf_qtypes(qtype: str) -> Callable[[str, Any], str]:
    """Each tensor's GGML type: ``qtype`` for the ternary ones, the rest as llama.cpp keeps them.

    Norms (1-D) as F32, bytes of another type (bfloat16 weights) as they are, other
    float arrays in their own dtype (float64 as F32).
    """
    def rule(name: str, value: Any) -> str:
        if isinstance(value, TernaryTensor):
            return qtype
        if isinstance(value, GGUFBlocks):
            return value.qtype
        if value.ndim == 1 or value.dtype == np.float64:
            return "F32"
        return "F16" if value.dtype == np.float16 else "F32"
    return rule


def model_name(path: str | os.PathLike[str], config: Mapping[str, Any]) -> str:
    """``general.name``: the config's ``_name_or_path``, else the directory's name."""
    name = config.get("_name_or_path")
    if isinstance(name, str) and name:
        return os.path.basename(name.rstrip("/")) or name
    return os.path.basename(os.path.abspath(os.fspath(path)))
