"""A Hugging Face tokenizer as llama.cpp's ``tokenizer.ggml.*`` metadata.

llama.cpp runs a model on text only with the tokenizer in the GGUF file. This module
writes it the way llama.cpp's ``convert_hf_to_gguf.py`` does for a byte-level BPE
tokenizer (``tokenizer.json``, as microsoft/bitnet-b1.58-2B-4T's Llama 3 tokenizer):
``TextModel.get_vocab_base`` (the tokenizer loaded by transformers' ``AutoTokenizer``;
ids past the tokenizer's up to the config's ``vocab_size`` as ``[PAD{i}]``, UNUSED;
added tokens CONTROL when special or looking special, else USER_DEFINED) and
``_set_vocab_gpt2`` (``tokenizer.ggml.model`` "gpt2", the pre-tokenizer name, the
tokens and their types, then the ``gguf`` package's ``SpecialVocab`` for the merges,
the special token ids, ``add_bos_token`` and the chat template). The keys are
recorded from the ``gguf`` package's own ``GGUFWriter`` methods.

llama.cpp names a pre-tokenizer by hashing the tokens of a test text, a table that
knows only released models' vocabularies. The name stands for the regular
expressions that split text before BPE (``llama-vocab.cpp``), and tritnum reads
those from ``tokenizer.json`` (:data:`PRE_TOKENIZERS`): the same name for the same
splitting, whatever the vocabulary. A pre-tokenizer llama.cpp has no name for is
refused, as llama.cpp's converter refuses it.

Not converted: SentencePiece tokenizers (``tokenizer.model``, the older BitNet 3B
checkpoints; llama.cpp reads them with the ``sentencepiece`` package) and BPE with
byte fallback: FormatError naming the tokenizer, ``tokenizer=False`` converts the
model without one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ...errors import FormatError
from .values import GGUFValue

__all__ = ["PRE_TOKENIZERS", "TOKENIZER_FILE", "pre_tokenizer", "tokenizer_metadata"]

TOKENIZER_FILE = "tokenizer.json"
# Llama 3's split, the "original regex from tokenizer.json" llama-vocab.cpp quotes for
# LLAMA_VOCAB_PRE_TYPE_LLAMA3 (its own copy spells the case-insensitive group out)
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
#: llama.cpp's pre-tokenizer name (``tokenizer.ggml.pre``) for each pre-tokenizer of a
#: ``tokenizer.json``, as :func:`pre_tokenizer` describes it: Split steps by their
#: pattern, behavior and inversion, ByteLevel steps by their prefix space and regex.
PRE_TOKENIZERS: dict[tuple[tuple[Any, ...], ...], str] = {
    (("Split", _LLAMA3_SPLIT, "Isolated", False), ("ByteLevel", False, False)): "llama-bpe",
    (("ByteLevel", False, True),): "gpt-2",
}


def _json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # too deep: RecursionError
        raise FormatError(f"{path!r} is not JSON: {type(exc).__name__}: {exc}") from None
    if not isinstance(data, dict):
        raise FormatError(f"{path!r} holds a {type(data).__name__}, not a JSON object")
    return data


def _step(step: Any, where: str) -> tuple[Any, ...]:
    if not isinstance(step, Mapping):
        raise FormatError(f"{where}: a pre-tokenizer step is {step!r:.60}, not an object")
    kind = step.get("type")
    if kind == "Split":
        pattern = step.get("pattern")
        regex = pattern.get("Regex", pattern.get("String")) if isinstance(pattern, Mapping) \
            else pattern
        found: tuple[Any, ...] = ("Split", regex, step.get("behavior"), step.get("invert", False))
    elif kind == "ByteLevel":
        found = ("ByteLevel", step.get("add_prefix_space", True), step.get("use_regex", True))
    else:
        found = (kind,)
    if not all(isinstance(v, (str, bool, type(None))) for v in found):  # a list, a number...
        raise FormatError(f"{where}: a pre-tokenizer step holds {found!r:.100}, where "
                          "tokenizer.json has strings and booleans")
    return found


def pre_tokenizer(tokenizer: Mapping[str, Any], where: str = TOKENIZER_FILE
                  ) -> tuple[tuple[Any, ...], ...]:
    """The pre-tokenizer of a ``tokenizer.json`` as the steps that split text.

    A Sequence is its steps in order; a Split is ``("Split", pattern, behavior,
    invert)``; a ByteLevel ``("ByteLevel", add_prefix_space, use_regex)`` (with
    transformers' defaults); another kind ``(type,)``.
    """
    pre = tokenizer.get("pre_tokenizer")
    if not isinstance(pre, Mapping):
        return ()
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if not isinstance(steps, list):
        raise FormatError(f"{where}: pre_tokenizer.pretokenizers is {steps!r:.60}, not a list")
    return tuple(_step(step, where) for step in steps)


def _kind(part: Any) -> Any:
    """The ``type`` of a part of ``tokenizer.json`` (None where it is not an object)."""
    return part.get("type") if isinstance(part, Mapping) else None


def _looks_special(token: str) -> bool:
    """llama.cpp's ``does_token_look_special``: added tokens it types CONTROL though not special."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (token.startswith("<|") and token.endswith("|>"))
            or (token.startswith("<\uff5c") and token.endswith("\uff5c>"))
            or (token.startswith("<unused") and token.endswith(">")))


def _vocab_base(tokenizer: Any, vocab_size: int, where: str) -> tuple[list[str], list[int]]:
    """Tokens and their types as llama.cpp's ``TextModel.get_vocab_base`` lists them."""
    from gguf import TokenType

    vocab = tokenizer.vocab
    if vocab and max(vocab.values()) >= vocab_size:
        raise FormatError(f"{where}: token id {max(vocab.values())} is past the model's "
                          f"vocab_size {vocab_size} (config.json)")
    reverse = {i: token for token, i in vocab.items()}
    added = tokenizer.get_added_vocab()
    decoder = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for i in range(vocab_size):
        token = reverse.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
            continue
        if token not in added:
            types.append(TokenType.NORMAL)
        else:
            if not decoder[i].normalized:  # llama.cpp takes CONTROL and USER_DEFINED as normalized
                token = tokenizer.decode(tokenizer.encode(token, add_special_tokens=False))
            if decoder[i].special or _looks_special(token):
                types.append(TokenType.CONTROL)
            else:
                token = token.replace("\u2581", " ")  # user-defined spaces, pre-normalized
                types.append(TokenType.USER_DEFINED)
        tokens.append(token)
    return tokens, [int(t) for t in types]


def _gguf_value(value: Any) -> GGUFValue:
    """A ``gguf.GGUFWriter`` key-value as tritnum's :class:`GGUFValue`.

    An array's item type is the writer's own choice where it keeps none
    (``GGUFValueType.get_type`` of the first item: ints as int32).
    """
    from gguf import GGUFValueType

    kind = value.type.name.lower()
    if kind != "array":
        return GGUFValue(kind, value.value)
    items = [v.decode("utf-8", "surrogateescape") if isinstance(v, (bytes, bytearray)) else v
             for v in value.value]
    sub_type = value.sub_type or GGUFValueType.get_type(value.value[0])
    return GGUFValue("array", items, item_type=sub_type.name.lower())


def tokenizer_metadata(path: str | os.PathLike[str], vocab_size: int,
                       arch: str) -> dict[str, GGUFValue]:
    """The ``tokenizer.ggml.*`` keys of the tokenizer in model directory ``path``.

    Empty where ``path`` has no ``tokenizer.json``. FormatError for a tokenizer
    file that is not JSON or that transformers cannot load, ids past
    ``vocab_size``, a tokenizer other than byte-level BPE, a pre-tokenizer llama.cpp
    has no name for; ImportError without transformers (llama.cpp's converter loads
    the tokenizer with it).
    """
    path = os.fspath(path)
    where = os.path.join(path, TOKENIZER_FILE)
    if not os.path.isfile(where):
        return {}
    tokenizer_json = _json(where)
    model = tokenizer_json.get("model")
    decoder = tokenizer_json.get("decoder")
    if (_kind(model) != "BPE" or model.get("byte_fallback", False)
            or _kind(decoder) != "ByteLevel"):
        raise FormatError(f"{where}: not a byte-level BPE tokenizer (model {_kind(model)!r:.40}, "
                          f"decoder {_kind(decoder)!r:.40}); tritnum converts those only "
                          "(tokenizer=False converts the model without one)")
    steps = pre_tokenizer(tokenizer_json, where)
    pre = PRE_TOKENIZERS.get(steps)
    if pre is None:
        raise FormatError(f"{where}: llama.cpp has no pre-tokenizer splitting text as "
                          f"{steps!r:.200} (it knows {sorted(set(PRE_TOKENIZERS.values()))}); "
                          "tokenizer=False converts the model without a tokenizer")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ImportError("Writing a tokenizer into GGUF loads it with transformers, as "
                          "llama.cpp's converter does: pip install transformers (or convert "
                          "with tokenizer=False)") from None
    import gguf

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        tokens, types = _vocab_base(tokenizer, vocab_size, where)
        special = gguf.SpecialVocab(path, load_merges=True)
        writer = gguf.GGUFWriter(path=None, arch=arch)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        special.add_to_gguf(writer, quiet=True)
        # a chat template of other types than strings raises here or in GGUFValue
        return {key: _gguf_value(value) for key, value in writer.kv_data[0].items()
                if key.startswith("tokenizer.")}
    except (FormatError, ImportError):
        raise
    except Exception as exc:  # tokenizers', transformers' and gguf's own errors on a hostile file
        raise FormatError(f"cannot read the tokenizer in {path!r}: "
                          f"{type(exc).__name__}: {exc}") from exc
