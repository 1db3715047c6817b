"""transformers models as GGUF files of llama.cpp's ``bitnet`` and ``llama`` architectures.

The tensor names come from the ``gguf`` package's own tables (``TensorNameMap`` of
``MODEL_ARCH.BITNET`` or ``MODEL_ARCH.LLAMA``, ``TENSOR_NAMES``), the metadata keys
from its ``Keys``, the hyperparameters from the model's ``config.json``, as llama.cpp's
``convert_hf_to_gguf.py`` (``BitnetModel``, ``LlamaModel``) writes them. The ternary
projections keep their exact trits and scale; a tensor or a setting the architecture
has no place for is refused by name. llama.cpp's ``llama`` architecture rotates
adjacent pairs (RoPE "norm"), transformers rotates halves: the rows of the query and
key projections are permuted as ``LlamaModel.permute`` does (:func:`rope_rows`);
``bitnet`` rotates halves, as transformers.

Which BitNet architecture (:func:`bitnet_arch`) follows from the model's activation
(and a Llama with ternary projections, ``model_type`` "llama", is llama.cpp's ``llama``).
Mainline llama.cpp's ``bitnet`` (``src/models/bitnet.cpp``) computes the feed-forward
with SiLU (``LLM_FFN_SILU``): the 1bitLLM BitNet 3B graph. microsoft/bitnet-b1.58-2B-4T
and transformers' ``BitNetForCausalLM`` use relu²; llama.cpp computes such a file,
silently, with SiLU (measured: logits of a converted tiny model correlate 0.92 with
transformers' relu² ones and 0.9998 with its SiLU ones). A relu² model is written as
bitnet.cpp's ``bitnet-b1.58``, the architecture of microsoft's own
``bitnet-b1.58-2B-4T-gguf`` file and of bitnet.cpp's
``utils/convert-hf-to-gguf-bitnet.py`` (``BitnetModel.model_arch =
gguf.MODEL_ARCH.BITNET_B158``), whose graph (``build_bitnet_158``: relu², the two
sub-norms, rotate-half RoPE, the output by ``token_embd``) is transformers' model; the
same tensor names, its hyperparameters as bitnet.cpp's converter writes them (no RoPE
scaling keys). Mainline llama.cpp refuses that name rather than computing it wrong.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...errors import FormatError
from ...packing import pack
from ...quantize import TernaryTensor
from ..hf_checkpoint import bitnet_settings
from .model import GGUFBlocks, LazyTernary
from .quantize import FILE_TYPES
from .values import GGUFValue

__all__ = ["ARCHS", "BITNET_RELU2_ARCH", "bitnet_arch", "check_shapes", "gguf_metadata",
           "gguf_names",
           "gguf_qtypes", "model_name", "rope_rows"]

#: bitnet.cpp's architecture for BitNet b1.58 with relu² (its MODEL_ARCH.BITNET_B158).
BITNET_RELU2_ARCH = "bitnet-b1.58"
#: llama.cpp architecture -> (gguf.MODEL_ARCH member whose tensor names it uses, the
#: hidden_act its graph computes). The gguf package has no BITNET_B158: bitnet.cpp's list
#: of its tensors is BITNET's with an optional output and rope_freqs, the same names.
ARCHS = {"bitnet": ("BITNET", "silu"), BITNET_RELU2_ARCH: ("BITNET", "relu2"),
         "llama": ("LLAMA", "silu")}
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
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**32:
        raise FormatError(f"config.json: {key} is {value!r:.60}, not an int > 0 that GGUF's "
                          f"uint32 holds (llama.cpp's bitnet architecture needs it)")
    return value


def _float(config: Mapping[str, Any], key: str, value: Any) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not 0 < value < float(np.finfo(np.float32).max)):  # NaN and inf fail too
        raise FormatError(f"config.json: {key} is {value!r:.60}, not a finite number > 0")
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


def _heads(config: Mapping[str, Any]) -> tuple[int, int]:
    """The query and key-value head counts of ``config``."""
    heads = _int(config, "num_attention_heads")
    kv_heads = config.get("num_key_value_heads") or heads
    return heads, _int({"num_key_value_heads": kv_heads}, "num_key_value_heads")


def bitnet_arch(config: Mapping[str, Any]) -> str:
    """The architecture that computes a BitNet model of ``config``.

    llama.cpp's ``llama`` for a Llama with ternary projections (``model_type``
    "llama": HF1BitLLM's checkpoints, a Llama trained with ``tritnum.torch``);
    otherwise bitnet.cpp's ``bitnet-b1.58`` for relu² (transformers' default),
    llama.cpp's ``bitnet`` for SiLU.
    """
    if config.get("model_type") == "llama":
        return "llama"
    return "bitnet" if config.get("hidden_act", "relu2") == "silu" else BITNET_RELU2_ARCH


def gguf_metadata(config: Mapping[str, Any], qtype: str, name: str,
                  arch: str = "bitnet") -> dict[str, GGUFValue]:
    """The GGUF metadata of an ``arch`` model of ``config`` whose projections are ``qtype``.

    FormatError for a hyperparameter that is missing or of the wrong type, or a
    setting llama.cpp's architecture cannot express.
    """
    keys = _gguf().Keys
    if (arch != "llama" or config.get("quantization_config") is not None) and bitnet_settings(
            config, "config.json")["use_rms_norm"]:
        raise FormatError(f"config.json: quantization_config.use_rms_norm is true: llama.cpp's "
                          f"{arch} architecture has no norm inside each projection")
    act = ARCHS[arch][1]
    if config.get("hidden_act", act) != act:
        which = "" if arch == "llama" else " (llama.cpp's bitnet computes silu, bitnet.cpp's " \
            f"{BITNET_RELU2_ARCH} relu2)"
        raise FormatError(f"config.json: hidden_act is {config.get('hidden_act')!r:.60}; "
                          f"the {arch} architecture computes {act}{which}")
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise FormatError(f"config.json: attention_bias or mlp_bias is true; this converter "
                          f"writes llama.cpp's {arch} architecture without biases")
    n = {key: _int(config, key) for key in _INTS}
    heads, kv_heads = _heads(config)
    head_dim = _int({"head_dim": config.get("head_dim") or n["hidden_size"] // heads},
                    "head_dim")
    if head_dim * heads != n["hidden_size"] or heads % kv_heads:
        raise FormatError(f"config.json: hidden_size {n['hidden_size']}, "
                          f"{heads} heads of {head_dim}, {kv_heads} key-value heads do not fit "
                          f"llama.cpp's {arch} attention")
    eps = _float(config, "rms_norm_eps", config.get("rms_norm_eps", 1e-5))

    def u32(v: int) -> GGUFValue:
        return GGUFValue("uint32", v)

    def f32(v: float) -> GGUFValue:
        return GGUFValue("float32", v)

    def key(k: str) -> str:
        return k.format(arch=arch)

    out = {
        keys.General.ARCHITECTURE: GGUFValue("string", arch),
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
        keys.General.FILE_TYPE: u32(FILE_TYPES[qtype]),
    }
    if arch == "bitnet":  # as llama.cpp's BitnetModel writes them (bitnet.cpp's does not)
        out[key(keys.Rope.SCALING_TYPE)] = GGUFValue("string", "linear")
        out[key(keys.Rope.SCALING_FACTOR)] = f32(1.0)
    return out


def rope_rows(value: Any, heads: int) -> Any:
    """The rows of a query or key projection in llama.cpp's RoPE order (``LlamaModel.permute``).

    Within each head, rows ``(h, half, i)`` go to ``(h, i, half)``: transformers
    rotates the two halves of a head, llama.cpp's ``llama`` adjacent pairs. Scales
    follow their rows; a :class:`~.model.LazyTernary` is permuted once loaded.
    """
    out = value.shape[0]
    if out % (2 * heads):
        raise FormatError(f"a projection of {out} rows does not split into {heads} heads of "
                          "an even size")
    if isinstance(value, LazyTernary):
        return value.then(lambda loaded: rope_rows(loaded, heads))
    order = np.arange(out).reshape(heads, 2, out // heads // 2).swapaxes(1, 2).reshape(-1)
    if not isinstance(value, TernaryTensor):
        return np.asarray(value)[order]
    scales = value.scales if value.group_size is None else np.asarray(value.scales)[order]
    return TernaryTensor(pack(value.packed.unpack()[order], value.packed.format), scales,
                         value.group_size)


def gguf_names(names: list[str], config: Mapping[str, Any],
               arch: str = "bitnet") -> dict[str, str]:
    """GGUF names of transformers' bitnet tensors ``names``; FormatError naming the rest."""
    gguf = _gguf()
    blocks = _int(config, "num_hidden_layers")
    table = gguf.TensorNameMap(getattr(gguf.MODEL_ARCH, ARCHS[arch][0]), blocks)
    out: dict[str, str] = {}
    refused = []
    for name in names:
        base, dot, suffix = name.rpartition(".")
        mapped = table.get_name(base) if dot else None
        for pattern, tensor in _SUB_NORMS.items():
            match = re.fullmatch(pattern, base)
            if mapped is None and match and int(match.group(1)) < blocks and arch != "llama":
                kind = getattr(gguf.MODEL_TENSOR, tensor)
                mapped = gguf.TENSOR_NAMES[kind].format(bid=int(match.group(1)))
        if mapped is None or suffix != "weight":
            refused.append(name)
        else:
            out[name] = f"{mapped}.{suffix}"
    if refused:
        tied = " (llama.cpp's bitnet architecture multiplies by token_embd for the output: " \
               "it takes models with tie_word_embeddings)" if "lm_head.weight" in refused else ""
        raise FormatError(f"{len(refused)} tensors have no place in llama.cpp's {arch} "
                          f"architecture: {', '.join(refused[:6])}"
                          + (", ..." if len(refused) > 6 else "") + tied)
    return out


def check_shapes(shapes: Mapping[str, tuple[int, ...]], config: Mapping[str, Any]) -> None:
    """FormatError for a tensor (by GGUF name) whose shape is not the one llama.cpp expects.

    From ``config`` (checked by :func:`gguf_metadata`): llama.cpp's loader refuses a
    file whose tensor has another shape than its hyperparameters give, so a
    checkpoint whose safetensors header disagrees with its ``config.json`` is refused
    before anything is written.
    """
    heads, kv_heads = _heads(config)
    hidden, ff, vocab = (_int(config, k) for k in ("hidden_size", "intermediate_size",
                                                  "vocab_size"))
    head_dim = config.get("head_dim") or hidden // heads
    expected = {"token_embd": (vocab, hidden), "output": (vocab, hidden),
                "attn_q": (heads * head_dim, hidden), "attn_k": (kv_heads * head_dim, hidden),
                "attn_v": (kv_heads * head_dim, hidden), "attn_output": (hidden, heads * head_dim),
                "ffn_gate": (ff, hidden), "ffn_up": (ff, hidden), "ffn_down": (hidden, ff),
                "ffn_sub_norm": (ff,)}
    wrong = []
    for name, shape in shapes.items():
        kind = name.split(".")[-2]
        want = expected.get(kind, (hidden,) if "norm" in kind else None)
        if want is not None and tuple(shape) != want:
            wrong.append(f"{name} {tuple(shape)}, not {want}")
    if wrong:
        raise FormatError(f"{len(wrong)} tensors do not have the shapes config.json gives "
                          f"(llama.cpp would refuse the file): {'; '.join(wrong[:4])}"
                          + ("; ..." if len(wrong) > 4 else ""))


def gguf_qtypes(qtype: str) -> Callable[[str, Any], str]:
    """Each tensor's GGML type: ``qtype`` for the ternary ones, the rest as llama.cpp keeps them.

    Norms (1-D) as F32, bytes of another type (bfloat16 weights) as they are, other
    float arrays in their own dtype (float64 as F32).
    """
    def rule(name: str, value: Any) -> str:
        if isinstance(value, (TernaryTensor, LazyTernary)):
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
