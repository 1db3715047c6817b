"""tn.io.convert: HF bitnet checkpoints to GGUF (llama.cpp's bitnet architecture), tritnum files.

The oracles: the gguf package (its reader, its TQ1_0/TQ2_0 decoders), tritnum's own
I2_S encoder, and transformers' BitNetForCausalLM, whose logits a NumPy forward pass
over the GGUF file's tensors reproduces. The tokenizer keys are checked against a tiny
BPE tokenizer built with the ``tokenizers`` package, whose tokens, ids and merges are
known here, typed by hand as llama.cpp's ``get_vocab_base`` types them; bitnet.cpp's
architecture (of relu² models) against a transcription of microsoft's own 2B-4T I2_S file.
"""

from __future__ import annotations

import gc
import importlib
import json
import mmap
import os
import struct
import subprocess
import sys
import warnings
import weakref

import numpy as np
import pytest

import tritnum as tn
from tritnum.errors import FormatError
from tritnum.io import hf_checkpoint
from tritnum.io.gguf.container import map_file
from tritnum.io.gguf.file import drop_view
from tritnum.io.gguf.model import LazyTernary
from tritnum.io.hf_checkpoint import open_hf_bitnet

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
gguf = pytest.importorskip("gguf")
from safetensors.torch import save_file  # noqa: E402
from transformers.integrations.bitnet import pack_weights  # noqa: E402

tokenizers = pytest.importorskip("tokenizers")
transformers.logging.set_verbosity_error()
# Llama 3's split (tokenizer.json's Split regex), as microsoft/bitnet-b1.58-2B-4T has it
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BASE = [*"abcdefghijklmnopqrstuvwxyz!.", "\u0120"]  # \u0120: the byte-level space
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("\u0120", "w")]
# the added tokens and the types llama.cpp's get_vocab_base gives them: special -> CONTROL
# (3), not special -> USER_DEFINED (4), unless it looks special ("<|...|>") -> CONTROL
ADDED = [("<|begin_of_text|>", True, 3), ("<|end_of_text|>", True, 3), ("<tool>", False, 4),
         ("<|reserved_0|>", False, 3)]
TOKENS = np.array([[3, 17, 0, 99, 42, 5, 127, 64]])
PROJECTIONS = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
               "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


@pytest.fixture(autouse=True, scope="module")
def _eager_transformers():
    """transformers' bitnet code is @torch.compile'd: run it eagerly in this module only
    (TORCH_COMPILE_DISABLE set here would leak into later modules' torch.compile tests)."""
    with torch._dynamo.config.patch(disable=True):
        yield



def gguf_config(**kwargs):
    """Hidden 256 (TQ blocks are 256 values), 2 layers, vocab 128, tied output (llama.cpp's)."""
    return transformers.BitNetConfig(vocab_size=128, hidden_size=256, intermediate_size=512,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, bos_token_id=0, eos_token_id=1,
                                     tie_word_embeddings=True, dtype="float32", **kwargs)


def write_tokenizer(path, pre="llama3", **config):
    """A tiny byte-level BPE tokenizer (tokenizer.json, tokenizer_config.json) in ``path``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(BASE)}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=MERGES, ignore_merges=True))
    tokenizer.pre_tokenizer = {
        "llama3": pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        "gpt2": pre_tokenizers.ByteLevel(add_prefix_space=False),
        "whitespace": pre_tokenizers.Whitespace()}[pre]
    tokenizer.decoder = decoders.ByteLevel()
    for text, special, _ in ADDED:
        tokenizer.add_tokens([AddedToken(text, special=special, normalized=False)])
    os.makedirs(path, exist_ok=True)
    tokenizer.save(os.path.join(path, "tokenizer.json"))
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
              "add_bos_token": True, "chat_template": "{{ bos_token }}{{ messages }}",
              "tokenizer_class": "PreTrainedTokenizerFast", **config}
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)


def expected_tokens(vocab_size=128):
    """The token list and types llama.cpp writes for write_tokenizer's tokenizer."""
    tokens = [*BASE, *("".join(m) for m in MERGES), *(t for t, _, _ in ADDED)]
    types = [1] * (len(BASE) + len(MERGES)) + [k for _, _, k in ADDED]
    pads = range(len(tokens), vocab_size)  # ids the tokenizer lacks: [PAD{id}], UNUSED
    return tokens + [f"[PAD{i}]" for i in pads], types + [5] * len(pads)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """An offline autobitlinear checkpoint: random trits, scales exact in float16 and bfloat16."""
    path = tmp_path_factory.mktemp("gguf") / "model"
    torch.manual_seed(0)
    model = transformers.BitNetForCausalLM(gguf_config())
    state, trits = {}, {}
    for i, (name, value) in enumerate(model.state_dict().items()):
        if name == "lm_head.weight":
            continue
        if name.endswith("_proj.weight"):
            t = torch.randint(-1, 2, value.shape, dtype=torch.int8)
            trits[name] = t.numpy().copy()
            state[name] = pack_weights(t.clone())
            state[name.removesuffix("weight") + "weight_scale"] = torch.tensor(
                [0.03125 * (1 + i % 8 / 8)])
        elif name.endswith("norm.weight"):
            state[name] = 1 + 0.1 * torch.randn(value.shape)  # norms that are not all ones
        else:
            state[name] = value.contiguous()
    os.makedirs(path)
    save_file(state, os.path.join(path, "model.safetensors"))
    config = gguf_config()
    config.quantization_config = {"quant_method": "bitnet", "linear_class": "autobitlinear",
                                  "quantization_mode": "offline"}
    config.save_pretrained(path)
    write_tokenizer(path)
    return path, trits, state


def ternary_llama(seed, ternary):
    """A tiny float Llama computing with the values of ``ternary(name, weight)`` for each
    projection, its config, and its tensors (those TernaryTensors, the rest arrays)."""
    torch.manual_seed(seed)
    config = llama_config()
    model = transformers.LlamaForCausalLM(config).float().eval()
    tensors = {}
    for name, value in model.state_dict().items():
        if name.endswith("_proj.weight"):
            tensors[name] = ternary(name, value.numpy())
            value.copy_(torch.from_numpy(tensors[name].dequantize()))  # what the model computes
        else:
            tensors[name] = value.numpy().copy()
    return config, model, tensors


def llama_config():
    """A tiny Llama (hidden 256: TQ blocks), 2 layers, grouped-query attention."""
    return transformers.LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=512,
                                    num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, rope_theta=10000.0,
                                    rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1)


def dequantized(reader):
    """A GGUF file's tensors as float64 in NumPy order, decoded by the gguf package."""
    return {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
            .reshape(tuple(reversed([int(d) for d in t.shape]))) for t in reader.tensors}


def _tensors(reader):
    return {t.name: t for t in reader.tensors}


def _field(reader, key):
    return reader.fields[key].contents()


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0"])
def test_gguf_names_types_metadata_values(model_dir, tmp_path, qtype):
    path, trits, state = model_dir
    report = tn.io.convert(path, tmp_path / "m.gguf", qtype=qtype)
    assert report.counts()[qtype] == 14
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    arch = "bitnet-b1.58"  # relu²: bitnet.cpp's (llama.cpp's bitnet computes SiLU)
    assert _field(reader, "general.architecture") == arch
    expected = {"vocab_size": 128, "embedding_length": 256, "feed_forward_length": 512,
                "block_count": 2, "context_length": 2048, "attention.head_count": 4,
                "attention.head_count_kv": 2, "rope.dimension_count": 64}
    for key, value in expected.items():
        assert _field(reader, f"{arch}.{key}") == value, key
    assert _field(reader, "general.file_type") == {"TQ1_0": 36, "TQ2_0": 37}[qtype]
    assert _field(reader, "general.name") == "model"
    assert _field(reader, f"{arch}.rope.freq_base") == 500000.0
    assert _field(reader, f"{arch}.attention.layer_norm_rms_epsilon") == np.float32(1e-5)
    tensors = _tensors(reader)
    names = {f"blk.{i}.{g}.weight" for i in range(2) for g in [
        *PROJECTIONS.values(), "attn_norm", "ffn_norm", "attn_sub_norm", "ffn_sub_norm"]}
    assert set(tensors) == names | {"token_embd.weight", "output_norm.weight"}
    for name, t in trits.items():
        i, module = name.split(".")[2], name.split(".")[-2]
        entry = tensors[f"blk.{i}.{PROJECTIONS[module]}.weight"]
        assert entry.tensor_type.name == qtype
        values = gguf.quants.dequantize(entry.data, entry.tensor_type)
        scale = state[name.removesuffix("weight") + "weight_scale"].item()
        np.testing.assert_array_equal(values, t * np.float32(scale))  # exact: scale * trit
    for hf, name in [("model.layers.1.self_attn.attn_sub_norm.weight", "blk.1.attn_sub_norm"),
                     ("model.norm.weight", "output_norm"),
                     ("model.embed_tokens.weight", "token_embd")]:
        entry = tensors[name + ".weight"]
        assert entry.tensor_type.name == "F32"
        np.testing.assert_array_equal(np.asarray(entry.data).reshape(state[hf].shape),
                                      state[hf].numpy())


def test_i2s_bytes_are_tritnums_encoder(model_dir, tmp_path):
    path, _, _ = model_dir
    tn.io.convert(path, tmp_path / "m.gguf", qtype="I2_S")
    hf, _ = tn.io.read_hf_bitnet(path)
    model = tn.io.read_gguf(tmp_path / "m.gguf")
    raw, header = map_file(tmp_path / "m.gguf")  # the gguf package does not know I2_S
    entry = next(t for t in header.tensors if t.name == "blk.0.ffn_down.weight")
    w = hf["model.layers.0.mlp.down_proj.weight"]
    expected = tn.io.to_gguf_blocks(w, "I2_S")
    assert np.array_equal(raw[entry.start:entry.start + entry.nbytes], expected)
    assert model.qtypes["blk.0.ffn_down.weight"] == "I2_S"
    back = model["blk.0.ffn_down.weight"]
    assert back.packed.unpack().tolist() == w.packed.unpack().tolist()
    assert back.scales == w.scales


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0", "I2_S"])
def test_streamed_file_is_the_eager_file(model_dir, tmp_path, monkeypatch, qtype):
    """The streamed conversion (projections read as they are written) writes the bytes the
    eager one (every projection decoded first, as read_hf_bitnet gives them) writes."""
    path, _, _ = model_dir
    tensors, _ = open_hf_bitnet(path)
    assert isinstance(tensors["model.layers.0.mlp.down_proj.weight"], LazyTernary)
    tn.io.convert(path, tmp_path / "streamed.gguf", qtype=qtype)
    convert_module = importlib.import_module("tritnum.io.convert")  # tn.io.convert: a function
    monkeypatch.setattr(convert_module, "open_hf_bitnet", tn.io.read_hf_bitnet)
    tn.io.convert(path, tmp_path / "eager.gguf", qtype=qtype)
    assert (tmp_path / "streamed.gguf").read_bytes() == (tmp_path / "eager.gguf").read_bytes()


def test_streamed_online_checkpoint_is_the_eager_file(tmp_path, monkeypatch):
    """bfloat16 master weights (online mode), quantized as each projection is written."""
    torch.manual_seed(4)
    model = transformers.BitNetForCausalLM(gguf_config()).to(torch.bfloat16)
    path = tmp_path / "online"
    os.makedirs(path)
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
              os.path.join(path, "model.safetensors"))
    model.config.quantization_config = {"quant_method": "bitnet", "linear_class": "autobitlinear",
                                        "quantization_mode": "online"}
    model.config.save_pretrained(path)
    lazy, _ = open_hf_bitnet(path, bfloat16="bits")
    assert lazy["model.layers.1.mlp.down_proj.weight"].shape == (256, 512)
    tn.io.convert(path, tmp_path / "streamed.gguf", qtype="TQ1_0", tokenizer=False)
    convert_module = importlib.import_module("tritnum.io.convert")
    monkeypatch.setattr(convert_module, "open_hf_bitnet", tn.io.read_hf_bitnet)
    tn.io.convert(path, tmp_path / "eager.gguf", qtype="TQ1_0", tokenizer=False)
    assert (tmp_path / "streamed.gguf").read_bytes() == (tmp_path / "eager.gguf").read_bytes()
    model_file = tn.io.read_gguf(tmp_path / "streamed.gguf")
    w = model.state_dict()["model.layers.1.mlp.down_proj.weight"].float()
    mean = w.abs().mean().item()
    np.testing.assert_array_equal(model_file["blk.1.ffn_down.weight"].packed.unpack(),
                                  torch.clamp(torch.round(w / mean), -1, 1).numpy())


def _spy_on_loads(monkeypatch, tmp_path):
    """Each projection decoded: whether the GGUF file was being written, and how many of the
    projections decoded before it are still alive (weak references to their trits; freed by
    reference counting, no garbage collection needed)."""
    seen = []
    decode = hf_checkpoint._offline_ternary

    def spy(*args):
        writing = any(n.endswith(".part") for n in os.listdir(tmp_path))
        seen.append([writing, sum(ref() is not None for _, _, ref in seen), lambda: None])
        t = decode(*args)
        seen[-1][2] = weakref.ref(t.packed.data)
        return t

    monkeypatch.setattr(hf_checkpoint, "_offline_ternary", spy)
    return seen


def test_streamed_one_projection_at_a_time(model_dir, tmp_path, monkeypatch):
    path, trits, _ = model_dir
    seen = _spy_on_loads(monkeypatch, tmp_path)
    tn.io.hf_bitnet_to_gguf(path, tmp_path / "m.gguf", tokenizer=False)
    assert len(seen) == len(trits) == 14
    assert all(writing and alive == 0 for writing, alive, _ in seen)  # header first, one held
    seen.clear()
    tn.io.read_hf_bitnet(path)  # the eager reader decodes each once, and keeps them
    assert len(seen) == 14 and seen[-1][1] == 13


def test_code_3_found_mid_write_leaves_no_file(model_dir, tmp_path, monkeypatch):
    """A hostile projection late in the file: FormatError naming it once earlier tensors are
    written, and neither the file nor its temporary remains."""
    path, _, state = model_dir
    bad = tmp_path / "bad"
    os.makedirs(bad)
    name = "model.layers.1.mlp.down_proj.weight"
    damaged = state[name].clone()
    damaged[3, 5] = 0b0011_0000  # code 3 in bits 4-5
    save_file({**state, name: damaged}, os.path.join(bad, "model.safetensors"))
    (bad / "config.json").write_text((path / "config.json").read_text())
    seen = _spy_on_loads(monkeypatch, tmp_path)
    for qtype in ("TQ2_0", "I2_S"):
        seen.clear()
        with pytest.raises(FormatError, match=rf"tensor '{name}'.*code 3"):
            tn.io.convert(bad, tmp_path / "m.gguf", qtype=qtype, tokenizer=False)
        assert sorted(os.listdir(tmp_path)) == ["bad"]
        assert len(seen) > 1 and all(writing for writing, _, _ in seen)  # others written first


def test_source_closed_without_garbage_collection(model_dir, tmp_path):
    """Once a streamed conversion returns or fails midway (a code 3), the checkpoint's
    mappings (and the file descriptors they hold) are closed by reference counting: no
    cycle keeps them (a plan and its chunks' closure did, until a garbage collection;
    on Windows a mapped shard cannot be deleted)."""
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("no /proc/self/maps")
    path, _, state = model_dir
    name = "model.layers.1.mlp.down_proj.weight"
    damaged = state[name].clone()
    damaged[0, 0] = 0xFF
    bad = _copy_of(model_dir, tmp_path, **{name: damaged})

    def mapped():
        return sum(line.rstrip().endswith("model.safetensors")
                   for line in open("/proc/self/maps"))
    gc.collect()
    assert mapped() == 0
    gc.disable()
    try:
        tn.io.hf_bitnet_to_gguf(path, tmp_path / "m.gguf", tokenizer=False)
        assert mapped() == 0
        with pytest.raises(FormatError, match="code 3"):
            tn.io.hf_bitnet_to_gguf(bad, tmp_path / "n.gguf", tokenizer=False)
        assert mapped() == 0
    finally:
        gc.enable()


def test_mapped_pages_let_go(tmp_path):
    """drop_view: the pages of a read-only mapped view leave the process (its Rss in
    /proc/self/smaps), the values read back the same; other arrays are left alone."""
    smaps = "/proc/self/smaps"
    if not os.path.exists(smaps):
        pytest.skip("no /proc/self/smaps")
    data = np.random.default_rng(0).integers(0, 256, 8 << 20, dtype=np.uint8)
    data.tofile(tmp_path / "f")
    with open(tmp_path / "f", "rb") as f:
        mapped = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)
    start = mapped.__array_interface__["data"][0]

    def resident_kb():
        lines = open(smaps).read().splitlines()
        at = next(i for i, line in enumerate(lines)
                  if line.split()[0].split("-")[0] == f"{start:x}")
        return next(int(line.split()[1]) for line in lines[at:] if line.startswith("Rss:"))

    assert int(mapped.sum(dtype=np.uint64)) == int(data.sum(dtype=np.uint64))
    assert resident_kb() >= 8 << 10
    view = mapped[1 << 20:].reshape(7, -1)
    drop_view(view)
    assert resident_kb() <= (1 << 10) + 4  # the first MiB (and a page) stay
    assert np.array_equal(view.reshape(-1), data[1 << 20:])
    copy = data.copy()
    drop_view(copy)
    assert np.array_equal(copy, data)


def _copy_of(model_dir, tmp_path, config=None, **tensors):
    """model_dir's checkpoint in tmp_path / "src", tensors replaced (None: left out)."""
    path, _, state = model_dir
    src = tmp_path / "src"
    os.makedirs(src)
    state = {k: v for k, v in {**state, **tensors}.items() if v is not None}
    save_file(state, os.path.join(src, "model.safetensors"))
    config = {**json.loads((path / "config.json").read_text()), **(config or {})}
    (src / "config.json").write_text(json.dumps(config))
    return src


_CUT = """
import importlib, os, struct, sys
import tritnum as tn
from tritnum.errors import FormatError
src, dst, at = sys.argv[1], sys.argv[2], int(sys.argv[3])
convert = importlib.import_module("tritnum.io.convert")
opened = convert.open_hf_bitnet
def cut_after_opening(*args, **kwargs):
    out = opened(*args, **kwargs)
    os.truncate(os.path.join(src, "model.safetensors"), at)
    return out
convert.open_hf_bitnet = cut_after_opening
try:
    tn.io.hf_bitnet_to_gguf(src, dst, tokenizer=False, progress=False)
except FormatError as exc:
    print(exc)
"""


@pytest.mark.parametrize("tensor", ["model.embed_tokens.weight",  # a plain, mapped tensor
                                    "model.layers.0.mlp.down_proj.weight"])  # a projection
def test_shard_cut_short_while_streaming(model_dir, tmp_path, tensor):
    """A shard truncated after its header was checked (opened, then cut at ``tensor``'s
    bytes): FormatError naming it, and no file; reading the mapped bytes past the new end
    would kill the process with SIGBUS (run in a subprocess for that reason)."""
    src = _copy_of(model_dir, tmp_path)
    raw = (src / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    at = 8 + n + json.loads(raw[8:8 + n])[tensor]["data_offsets"][0]
    out = tmp_path / "out"
    os.makedirs(out)
    done = subprocess.run([sys.executable, "-c", _CUT, str(src), str(out / "m.gguf"), str(at)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    gguf_name = {"model.embed_tokens.weight": "token_embd.weight"}.get(tensor, tensor)
    assert f"tensor '{gguf_name}': its file is now {at} bytes, cut short" in done.stdout
    assert os.listdir(out) == []


def _never_written(monkeypatch):
    convert_module = importlib.import_module("tritnum.io.convert")

    def write_gguf(*args, **kwargs):
        raise AssertionError("write_gguf called: a header checked only while writing")
    monkeypatch.setattr(convert_module, "write_gguf", write_gguf)


@pytest.mark.parametrize("replace, match", [
    (lambda w, s: (w.to(torch.int8), s), r"I8 values: bitnet weights are packed U8"),
    (lambda w, s: (w, torch.tensor([0.5, 0.5])), r"weight_scale must hold one value"),
    (lambda w, s: (w, torch.tensor([0.0])), r"weight_scale is 0.0, not a positive"),
    (lambda w, s: (w.to(torch.int32), None), r"I32 values without a weight_scale"),
])
def test_projection_header_refused_before_writing(model_dir, tmp_path, monkeypatch, replace,
                                                  match):
    """What a safetensors header says of a projection (its dtype, its weight_scale) is
    checked when the checkpoint is opened: the same FormatError from the eager reader and
    the streamed conversion, before write_gguf. An offline projection without its scale in
    an online-mode config (packed or integer values) was quantized as if master weights."""
    name = "model.layers.1.mlp.down_proj.weight"
    _, _, state = model_dir
    weight, scale = replace(state[name], state[name + "_scale"])
    mode = {"quant_method": "bitnet", "linear_class": "autobitlinear",
            "quantization_mode": "online" if scale is None else "offline"}
    src = _copy_of(model_dir, tmp_path, {"quantization_config": mode},
                   **{name: weight, name + "_scale": scale})
    with pytest.raises(FormatError, match=rf"tensor '{name}': {match}"):
        tn.io.read_hf_bitnet(src)
    _never_written(monkeypatch)
    with pytest.raises(FormatError, match=rf"tensor '{name}': {match}"):
        tn.io.convert(src, tmp_path / "m.gguf", tokenizer=False)
    assert sorted(os.listdir(tmp_path)) == ["src"]


@pytest.mark.parametrize("key, value", [
    ("vocab_size", 2**32), ("max_position_embeddings", 2**40), ("head_dim", 64.0),
    ("num_hidden_layers", 10**12), ("rms_norm_eps", float("inf")),
    ("rope_parameters", {"rope_type": "default", "rope_theta": float("nan")}),
    ("rms_norm_eps", 1e300),
])
def test_config_sizes_refused(model_dir, tmp_path, monkeypatch, key, value):
    """Sizes GGUF's uint32 cannot hold, a float head_dim, non-finite or float32-overflowing
    constants (json's NaN/Infinity): FormatError naming config.json, before writing (the
    sizes were a ValueError/TypeError of the metadata encoder, NaN and inf were written)."""
    src = _copy_of(model_dir, tmp_path, {key: value})
    _never_written(monkeypatch)
    named = key.replace("_parameters", "_theta")
    with pytest.raises(FormatError, match=rf"config.json: {named} is"):
        tn.io.convert(src, tmp_path / "m.gguf", tokenizer=False)


@pytest.mark.parametrize("config, tensors, match", [
    ({}, {"model.layers.1.mlp.down_proj.weight": torch.zeros((64, 256), dtype=torch.uint8)},
     r"blk\.1\.ffn_down\.weight \(256, 256\), not \(256, 512\)"),
    ({}, {"model.layers.0.mlp.ffn_sub_norm.weight": torch.ones(256)},
     r"blk\.0\.ffn_sub_norm\.weight \(256,\), not \(512,\)"),
    ({"intermediate_size": 1024}, {},
     r"blk\.0\.ffn_sub_norm\.weight \(512,\), not \(1024,\);.*; \.\.\."),
    ({"num_key_value_heads": 4}, {}, r"blk\.0\.attn_k\.weight \(128, 256\), not \(256, 256\)"),
])
def test_shapes_disagreeing_with_the_config(model_dir, tmp_path, monkeypatch, config, tensors,
                                            match):
    """A safetensors header whose shapes are not those config.json gives: refused by name
    before writing (the file was written, and llama.cpp's loader refuses it)."""
    src = _copy_of(model_dir, tmp_path, config, **tensors)
    _never_written(monkeypatch)
    with pytest.raises(FormatError, match=r"do not have the shapes config.json gives.*" + match):
        tn.io.convert(src, tmp_path / "m.gguf", tokenizer=False)


def test_destination_a_directory_refused_first(model_dir, tmp_path, monkeypatch):
    """A destination that is a directory (the source, or a folder named *.gguf): refused
    before any tensor is read or written (os.replace refused it after the whole file)."""
    path, _, _ = model_dir
    seen = _spy_on_loads(monkeypatch, tmp_path)
    (tmp_path / "d.gguf").mkdir()
    for dst in (tmp_path / "d.gguf", path):
        with pytest.raises(IsADirectoryError, match="is a directory"):
            tn.io.hf_bitnet_to_gguf(path, dst, tokenizer=False)
    assert seen == [] and sorted(os.listdir(tmp_path)) == ["d.gguf"]


def test_lazy_tensor_contradicting_the_header(tmp_path):
    """A LazyTernary that loads another shape (or not a TernaryTensor) than the header
    written from its declared shape: FormatError, no file, the earlier file kept."""
    w = tn.quantize(np.ones((4, 256)))
    path = tmp_path / "m.gguf"
    tn.io.write_gguf(path, {"w": w})
    before = path.read_bytes()
    for load in (lambda: tn.quantize(np.ones((8, 256))), lambda: np.ones((4, 256))):
        with pytest.raises(FormatError, match=r"tensor 'w': loaded .* the header announces"):
            tn.io.write_gguf(path, {"n": np.ones(3, np.float32), "w": LazyTernary((4, 256), load)},
                             qtype="TQ1_0")
        assert os.listdir(tmp_path) == ["m.gguf"] and path.read_bytes() == before


def test_interrupted_while_loading_leaves_no_file(tmp_path):
    """A KeyboardInterrupt (a BaseException) while a LazyTernary loads, after other tensors
    were written: it propagates, no temporary is left, the earlier file is kept."""
    path = tmp_path / "m.gguf"
    path.write_bytes(b"earlier")

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tn.io.write_gguf(path, {"n": np.ones(3, np.float32),
                                "w": LazyTernary((4, 256), interrupted)})
    assert os.listdir(tmp_path) == ["m.gguf"] and path.read_bytes() == b"earlier"


def test_lazy_tensor_requantized_reported(tmp_path):
    """A LazyTernary re-quantized while written (64-value groups into TQ's 256-value
    blocks): the report gives the error the eager write gives, the bytes are the same."""
    g = tn.quantize(np.random.default_rng(0).standard_normal((4, 256)), group_size=64)
    lazy = tn.io.write_gguf(tmp_path / "l.gguf", {"w": LazyTernary((4, 256), lambda: g)},
                            requantize=True)
    eager = tn.io.write_gguf(tmp_path / "e.gguf", {"w": g}, requantize=True)
    assert lazy.requantized == eager.requantized and lazy.requantized["w"] > 0.05
    assert (tmp_path / "l.gguf").read_bytes() == (tmp_path / "e.gguf").read_bytes()


@pytest.mark.parametrize("advice", ["refused", "absent"])
def test_pages_kept_where_advice_is_refused_or_absent(model_dir, tmp_path, monkeypatch, advice):
    """Letting mapped pages go is advice: where the system refuses MADV_DONTNEED (an
    OSError: EINVAL for an unknown advice) or lacks it (Windows), the conversion writes
    the same file (it raised the OSError before)."""
    path, _, _ = model_dir
    tn.io.hf_bitnet_to_gguf(path, tmp_path / "a.gguf", tokenizer=False)
    if advice == "refused":
        monkeypatch.setattr(mmap, "MADV_DONTNEED", 0x7FFF)
    else:
        monkeypatch.delattr(mmap, "MADV_DONTNEED")
    tn.io.hf_bitnet_to_gguf(path, tmp_path / "b.gguf", tokenizer=False)
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()


def test_tokenizer_keys(model_dir, tmp_path):
    """tokenizer.ggml.*: llama.cpp's _set_vocab_gpt2 keys for the directory's BPE tokenizer."""
    path, _, _ = model_dir
    tn.io.convert(path, tmp_path / "m.gguf")
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    tokens, types = expected_tokens()
    assert _field(reader, "tokenizer.ggml.model") == "gpt2"
    assert _field(reader, "tokenizer.ggml.pre") == "llama-bpe"
    assert _field(reader, "tokenizer.ggml.tokens") == tokens
    assert _field(reader, "tokenizer.ggml.token_type") == types
    assert reader.fields["tokenizer.ggml.token_type"].types == [
        gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]
    assert _field(reader, "tokenizer.ggml.merges") == [" ".join(m) for m in MERGES]
    begin, end = tokens.index("<|begin_of_text|>"), tokens.index("<|end_of_text|>")
    assert (_field(reader, "tokenizer.ggml.bos_token_id"),
            _field(reader, "tokenizer.ggml.eos_token_id")) == (begin, end) == (33, 34)
    assert _field(reader, "tokenizer.ggml.add_bos_token") is True
    assert _field(reader, "tokenizer.chat_template") == "{{ bos_token }}{{ messages }}"
    # the tokenizer keys follow the model's, as llama.cpp writes them (set_vocab after them)
    keys = list(reader.fields)
    assert keys.index("general.file_type") < keys.index("tokenizer.ggml.model")


def test_tokenizer_pre_tokenizers(model_dir, tmp_path):
    """GPT-2's byte-level split is "gpt-2"; a split llama.cpp has no name for is refused."""
    path, _, _ = model_dir
    write_tokenizer(tmp_path / "gpt2", pre="gpt2")
    tn.io.convert(path, tmp_path / "m.gguf", tokenizer=tmp_path / "gpt2")
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    assert _field(reader, "tokenizer.ggml.pre") == "gpt-2"
    assert _field(reader, "tokenizer.ggml.tokens") == expected_tokens()[0]
    write_tokenizer(tmp_path / "ws", pre="whitespace")
    with pytest.raises(FormatError, match=r"no pre-tokenizer.*tokenizer=False"):
        tn.io.convert(path, tmp_path / "ws.gguf", tokenizer=tmp_path / "ws")
    assert not (tmp_path / "ws.gguf").exists()


def test_without_a_tokenizer(model_dir, tmp_path):
    """No tokenizer.json: a warning and no tokenizer keys; tokenizer=False: silently none."""
    path, _, state = model_dir
    bare = tmp_path / "bare"
    os.makedirs(bare)
    save_file(state, os.path.join(bare, "model.safetensors"))
    (bare / "config.json").write_text((path / "config.json").read_text())
    with pytest.warns(UserWarning, match=r"no tokenizer\.json.*cannot run it on text"):
        tn.io.convert(bare, tmp_path / "m.gguf")
    fields = gguf.GGUFReader(tmp_path / "m.gguf").fields
    assert not any(k.startswith("tokenizer.") for k in fields)
    with pytest.raises(FormatError, match=r"has no tokenizer\.json"):
        tn.io.hf_bitnet_to_gguf(path, tmp_path / "x.gguf", tokenizer=bare)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tn.io.hf_bitnet_to_gguf(path, tmp_path / "n.gguf", tokenizer=False)
        tn.io.llama_to_gguf(tmp_path / "l.gguf", {}, {**json.loads(
            (path / "config.json").read_text()), "hidden_act": "silu"}, tokenizer=path)
    assert "tokenizer.ggml.tokens" not in gguf.GGUFReader(tmp_path / "n.gguf").fields
    assert _field(gguf.GGUFReader(tmp_path / "l.gguf"), "tokenizer.ggml.pre") == "llama-bpe"
    # from tritnum's own file: the tokenizer beside the config.json given
    tn.io.convert(path, tmp_path / "m.npz")
    tn.io.convert(tmp_path / "m.npz", tmp_path / "npz.gguf", config=path / "config.json")
    reader = gguf.GGUFReader(tmp_path / "npz.gguf")
    assert _field(reader, "tokenizer.ggml.tokens") == expected_tokens()[0]


@pytest.mark.parametrize("damage", ["not json", "a list", "ids past vocab_size", "wordpiece",
                                    "vocab not a map", "bad config", "too deep",
                                    "a list for a pattern", "an object for a behavior",
                                    "a number in a chat template"])
def test_hostile_tokenizer_files(model_dir, tmp_path, damage):
    path, _, _ = model_dir
    tok = tmp_path / "tok"
    write_tokenizer(tok)
    data = json.loads((tok / "tokenizer.json").read_text())
    if damage == "not json":
        (tok / "tokenizer.json").write_text('{"model": ')
    elif damage == "a list":
        (tok / "tokenizer.json").write_text("[1, 2]")
    elif damage == "ids past vocab_size":
        data["model"]["vocab"]["zz"] = 500
        (tok / "tokenizer.json").write_text(json.dumps(data))
    elif damage == "wordpiece":
        data["model"]["type"] = "WordPiece"
        (tok / "tokenizer.json").write_text(json.dumps(data))
    elif damage == "vocab not a map":
        data["model"]["vocab"] = "abc"
        (tok / "tokenizer.json").write_text(json.dumps(data))
    elif damage == "too deep":  # past Python's recursion limit
        (tok / "tokenizer.json").write_text('{"a": ' + "[" * 100_000)
    elif damage == "a list for a pattern":
        data["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": ["x"]}
        (tok / "tokenizer.json").write_text(json.dumps(data))
    elif damage == "an object for a behavior":
        data["pre_tokenizer"]["pretokenizers"][0]["behavior"] = {}
        (tok / "tokenizer.json").write_text(json.dumps(data))
    elif damage == "a number in a chat template":
        config = json.loads((tok / "tokenizer_config.json").read_text())
        config["chat_template"] = [{"name": "x", "template": 5}]
        (tok / "tokenizer_config.json").write_text(json.dumps(config))
    else:
        (tok / "tokenizer_config.json").write_text("{bos")
    with pytest.raises(FormatError, match="tokenizer"):
        tn.io.convert(path, tmp_path / "m.gguf", tokenizer=tok)
    assert sorted(os.listdir(tmp_path)) == ["tok"]  # nothing written


def test_i2s_is_bitnet_cpps_architecture(model_dir, tmp_path):
    """relu² as bitnet.cpp reads it: microsoft's bitnet-b1.58-2B-4T-gguf file's keys.

    Transcribed from that file's metadata (bitnet.cpp's llama.cpp printing it, microsoft/BitNet
    issues 226 and 373: 24 keys, 332 tensors for 30 layers) and from bitnet.cpp's
    utils/convert-hf-to-gguf-bitnet.py (BitnetModel: MODEL_ARCH.BITNET_B158, file type 40).
    """
    path, _, _ = model_dir
    tn.io.convert(path, tmp_path / "m.gguf", qtype="I2_S")
    model = tn.io.read_gguf(tmp_path / "m.gguf")
    arch = "bitnet-b1.58"
    assert model.architecture == arch
    hparams = {"vocab_size": 128, "context_length": 2048, "embedding_length": 256,
               "block_count": 2, "feed_forward_length": 512, "rope.dimension_count": 64,
               "attention.head_count": 4, "attention.head_count_kv": 2}
    for key, value in hparams.items():
        assert model.metadata[f"{arch}.{key}"] == tn.io.GGUFValue("uint32", value), key
    assert model.metadata[f"{arch}.rope.freq_base"] == tn.io.GGUFValue("float32", 500000.0)
    assert model.metadata[f"{arch}.attention.layer_norm_rms_epsilon"].type == "float32"
    assert model.metadata["general.file_type"] == tn.io.GGUFValue("uint32", 40)
    assert not [k for k in model.metadata if ".rope.scaling" in k or k.startswith("bitnet.")]
    per_block = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_sub_norm",
                 "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "ffn_sub_norm"]
    assert set(model) == {"token_embd.weight", "output_norm.weight"} | {
        f"blk.{i}.{n}.weight" for i in range(2) for n in per_block}  # 2 + 11 * blocks
    assert model.metadata["tokenizer.ggml.pre"].value == "llama-bpe"


def _rms(x, w, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _linear(x, w):
    """AutoBitLinear: activations fake-quantized to int8 per token, then x @ W.T (W = trits * g)."""
    scale = 127 / np.maximum(np.abs(x).max(-1, keepdims=True), 1e-5)
    return (np.clip(np.round(x * scale), -128, 127) / scale) @ w.T


def _rope(x, theta=500000.0):
    """Rotate-half RoPE (llama.cpp's NEOX type, which its bitnet architecture uses)."""
    n, d = x.shape[-2:]
    freqs = np.arange(n)[:, None] / theta ** (np.arange(0, d, 2) / d)
    cos, sin = np.cos(np.concatenate([freqs] * 2, -1)), np.sin(np.concatenate([freqs] * 2, -1))
    rotated = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos + rotated * sin


def numpy_forward(tensors, tokens, heads=4, kv_heads=2, layers=2):
    """The logits of llama.cpp's bitnet graph, in NumPy float64, over a GGUF file's tensors."""
    embed = tensors["token_embd.weight"]
    x = embed[tokens[0]]
    n = x.shape[0]
    for i in range(layers):
        def t(name, i=i):
            return tensors[f"blk.{i}.{name}.weight"]
        h = _rms(x, t("attn_norm"))
        q = _linear(h, t("attn_q")).reshape(n, heads, -1).transpose(1, 0, 2)
        k = _linear(h, t("attn_k")).reshape(n, kv_heads, -1).transpose(1, 0, 2)
        v = _linear(h, t("attn_v")).reshape(n, kv_heads, -1).transpose(1, 0, 2)
        q, k = _rope(q), _rope(k)
        k, v = np.repeat(k, heads // kv_heads, 0), np.repeat(v, heads // kv_heads, 0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        scores = np.where(np.tril(np.ones((n, n), bool)), scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        attn = ((p / p.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(n, -1)
        x = x + _linear(_rms(attn, t("attn_sub_norm")), t("attn_output"))
        h = _rms(x, t("ffn_norm"))
        ffn = np.maximum(_linear(h, t("ffn_gate")), 0) ** 2 * _linear(h, t("ffn_up"))
        x = x + _linear(_rms(ffn, t("ffn_sub_norm")), t("ffn_down"))
    return _rms(x, tensors["output_norm.weight"]) @ embed.T


def test_numpy_forward_over_the_gguf_file_reproduces_transformers(model_dir, tmp_path):
    path, _, _ = model_dir
    tn.io.convert(path, tmp_path / "m.gguf", qtype="TQ2_0")
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    tensors = dequantized(reader)
    ours = numpy_forward(tensors, TOKENS)
    model = transformers.BitNetForCausalLM.from_pretrained(path)
    with torch.no_grad():
        theirs = model(torch.from_numpy(TOKENS)).logits[0].double().numpy()
    assert np.abs(theirs).max() > 1
    # float32 against float64: an activation on a rounding boundary could quantize a step apart
    np.testing.assert_allclose(ours, theirs, atol=1e-4 * np.abs(theirs).max())  # measured 3e-7


def test_hf_tritnum_files_round_trip(model_dir, tmp_path):
    path, _, state = model_dir
    tn.io.convert(path, tmp_path / "m.safetensors")
    tensors = tn.load(tmp_path / "m.safetensors")
    assert isinstance(tensors["model.layers.0.self_attn.q_proj.weight"], tn.TernaryTensor)
    tn.io.convert(tmp_path / "m.safetensors", tmp_path / "back")  # the config is in the file
    tn.io.convert(path, tmp_path / "m.npz")
    with pytest.raises(FormatError, match="config"):
        tn.io.convert(tmp_path / "m.npz", tmp_path / "nothing")
    tn.io.convert(tmp_path / "m.npz", tmp_path / "back_npz", config=path / "config.json")
    safetensors = pytest.importorskip("safetensors.torch")
    for out in ("back", "back_npz"):
        written = safetensors.load_file(tmp_path / out / "model.safetensors")
        assert written.keys() == state.keys()
        for name, value in state.items():
            assert torch.equal(written[name], value), (out, name)
    assert sorted(os.listdir(tmp_path)) == ["back", "back_npz", "m.npz", "m.safetensors"]


def test_refused_by_name(tmp_path, model_dir):
    path, _, state = model_dir
    untied = tmp_path / "untied"
    os.makedirs(untied)
    save_file({**state, "lm_head.weight": state["model.embed_tokens.weight"].clone()},
              os.path.join(untied, "model.safetensors"))
    config = json.loads((path / "config.json").read_text())
    (untied / "config.json").write_text(json.dumps(config))
    with pytest.raises(FormatError, match=r"lm_head\.weight.*tie_word_embeddings"):
        tn.io.convert(untied, tmp_path / "m.gguf")
    for key, value, match in [("hidden_act", "gelu", "relu2"), ("num_hidden_layers", "2", "int"),
                              ("rope_parameters", {"rope_type": "yarn"}, "yarn")]:
        (untied / "config.json").write_text(json.dumps({**config, key: value}))
        save_file(state, os.path.join(untied, "model.safetensors"))
        with pytest.raises(FormatError, match=match):
            tn.io.convert(untied, tmp_path / "m.gguf")
    assert sorted(os.listdir(tmp_path)) == ["untied"]  # no file written


def test_vocab_size_is_the_embeddings_rows(model_dir, tmp_path):
    """A config whose vocab_size is not the embedding's rows: refused before any token list."""
    path, _, state = model_dir
    bad = tmp_path / "bad"
    os.makedirs(bad)
    save_file(state, os.path.join(bad, "model.safetensors"))
    config = json.loads((path / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "vocab_size": 2**32 - 1}))
    with pytest.raises(FormatError, match=r"vocab_size 4294967295.*128 rows"):
        tn.io.convert(bad, tmp_path / "m.gguf", tokenizer=path)
    assert sorted(os.listdir(tmp_path)) == ["bad"]


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint16])
def test_integer_tensors_refused(tmp_path, model_dir, dtype):
    """A norm or embedding of integers (a U16 tensor is not bfloat16) gets a FormatError."""
    path, _, state = model_dir
    bad = tmp_path / "bad"
    os.makedirs(bad)
    embed = state["model.embed_tokens.weight"]
    save_file({**state, "model.embed_tokens.weight": torch.zeros(embed.shape, dtype=dtype)},
              os.path.join(bad, "model.safetensors"))
    (bad / "config.json").write_text((path / "config.json").read_text())
    with pytest.raises(FormatError, match=r"model\.embed_tokens\.weight.*float tensors"):
        tn.io.convert(bad, tmp_path / "m.gguf", tokenizer=False)
    assert sorted(os.listdir(tmp_path)) == ["bad"]  # no file written


def test_silu_is_llama_cpps_bitnet(tmp_path, model_dir):
    """hidden_act silu: llama.cpp's bitnet, whose graph computes SiLU (src/models/bitnet.cpp:
    build_ffn(..., LLM_FFN_SILU, ...)), with the RoPE scaling keys its BitnetModel writes."""
    path, _, state = model_dir
    silu = tmp_path / "silu"
    os.makedirs(silu)
    save_file(state, os.path.join(silu, "model.safetensors"))
    config = json.loads((path / "config.json").read_text())
    (silu / "config.json").write_text(json.dumps({**config, "hidden_act": "silu"}))
    tn.io.convert(silu, tmp_path / "m.gguf", tokenizer=path)
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    assert _field(reader, "general.architecture") == "bitnet"
    assert _field(reader, "bitnet.block_count") == 2
    assert _field(reader, "bitnet.rope.scaling.type") == "linear"
    assert _field(reader, "bitnet.rope.scaling.factor") == 1.0
    assert {t.name for t in reader.tensors} == {t.name for t in gguf.GGUFReader(
        tn.io.convert(path, tmp_path / "relu2.gguf").path).tensors}  # the same tensors


def test_bitlinear_scales_to_gguf(tmp_path, model_dir):
    """weight_scale 3 (bitlinear): g = 1/3, kept in float32 by I2_S, rounded to float16 by TQ."""
    path, trits, _ = model_dir
    tensors, config = tn.io.read_hf_bitnet(path)
    thirds = {n: tn.TernaryTensor(v.packed, np.float32(1 / 3)) if isinstance(v, tn.TernaryTensor)
              else v for n, v in tensors.items()}
    tn.io.write_hf_bitnet(tmp_path / "bl", thirds, config, linear_class="bitlinear",
                          scale_dtype="bfloat16")
    name = "model.layers.1.mlp.up_proj.weight"
    assert tn.io.read_hf_bitnet(tmp_path / "bl")[0][name].scales == np.float32(1 / 3)
    tn.io.convert(tmp_path / "bl", tmp_path / "i2s.gguf", qtype="I2_S", tokenizer=path)
    model = tn.io.read_gguf(tmp_path / "i2s.gguf")
    assert model["blk.1.ffn_up.weight"].scales == np.float32(1 / 3)
    assert np.array_equal(model["blk.1.ffn_up.weight"].packed.unpack(), trits[name])
    tn.io.convert(tmp_path / "bl", tmp_path / "tq.gguf", tokenizer=False)
    entry = _tensors(gguf.GGUFReader(tmp_path / "tq.gguf"))["blk.1.ffn_up.weight"]
    values = gguf.quants.dequantize(entry.data, entry.tensor_type)
    np.testing.assert_array_equal(values, trits[name] * np.float32(np.float16(1 / 3)))


def test_bfloat16_kept_as_bits(model_dir, tmp_path):
    """bfloat16 weights pass through as their bits: BF16 in GGUF, BF16 in tritnum's file."""
    path, _, _ = model_dir
    tensors, config = tn.io.read_hf_bitnet(path)
    embed = tensors["model.embed_tokens.weight"]
    bits = (embed.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bfloat16
    tensors["model.embed_tokens.weight"] = bits
    tensors.dtypes["model.embed_tokens.weight"] = "BF16"
    tn.io.write_hf_bitnet(tmp_path / "bf16", tensors, config)
    back, _ = tn.io.read_hf_bitnet(tmp_path / "bf16", bfloat16="bits")
    assert back.dtypes["model.embed_tokens.weight"] == "BF16"
    assert np.array_equal(back["model.embed_tokens.weight"], bits)
    floats, _ = tn.io.read_hf_bitnet(tmp_path / "bf16")
    expected = (bits.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(floats["model.embed_tokens.weight"], expected)
    tn.io.convert(tmp_path / "bf16", tmp_path / "m.gguf", progress=False, tokenizer=False)
    tn.io.hf_bitnet_to_gguf(tmp_path / "bf16", tmp_path / "h.gguf", tokenizer=False)
    for file in ("m.gguf", "h.gguf"):  # hf_bitnet_to_gguf wrote F32 before: it read float32
        entry = _tensors(gguf.GGUFReader(tmp_path / file))["token_embd.weight"]
        assert entry.tensor_type.name == "BF16"
        np.testing.assert_array_equal(gguf.quants.dequantize(entry.data, entry.tensor_type),
                                      expected)
    tn.io.convert(tmp_path / "bf16", tmp_path / "m.safetensors")
    f = tn.io.read_safetensors(tmp_path / "m.safetensors", bfloat16="bits")
    assert f.dtypes["model.embed_tokens.weight"] == "BF16"
    assert np.array_equal(f["model.embed_tokens.weight"], bits)
    tn.io.convert(tmp_path / "bf16", tmp_path / "m.npz")  # .npz holds bfloat16 as float32
    assert np.array_equal(tn.load(tmp_path / "m.npz")["model.embed_tokens.weight"], expected)
    with pytest.raises(ValueError, match="bfloat16 must be one of"):
        tn.io.read_safetensors(tmp_path / "m.safetensors", bfloat16="uint16")


def _rope_pairs(x, theta):
    """llama.cpp's "norm" RoPE: adjacent pairs (2i, 2i + 1) rotate together."""
    n, d = x.shape[-2:]
    angles = np.arange(n)[:, None] / theta ** (np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles), np.sin(angles)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos
    return out


def llama_cpp_forward(t, tokens, heads, kv_heads, layers, theta, eps):
    """llama.cpp's llama graph in NumPy float64 over a GGUF file's tensors (float activations)."""
    x = t["token_embd.weight"][tokens[0]]
    n = x.shape[0]
    for i in range(layers):
        def w(name, i=i):
            return t[f"blk.{i}.{name}.weight"]
        h = _rms(x, w("attn_norm"), eps)
        q = _rope_pairs((h @ w("attn_q").T).reshape(n, heads, -1).transpose(1, 0, 2), theta)
        k = _rope_pairs((h @ w("attn_k").T).reshape(n, kv_heads, -1).transpose(1, 0, 2), theta)
        v = (h @ w("attn_v").T).reshape(n, kv_heads, -1).transpose(1, 0, 2)
        k, v = np.repeat(k, heads // kv_heads, 0), np.repeat(v, heads // kv_heads, 0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        scores = np.where(np.tril(np.ones((n, n), bool)), scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        x = x + ((p / p.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(n, -1) @ \
            w("attn_output").T
        h = _rms(x, w("ffn_norm"), eps)
        gate = h @ w("ffn_gate").T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w("ffn_up").T)) @ w("ffn_down").T
    return _rms(x, t["output_norm.weight"], eps) @ t["output.weight"].T


def test_llama_gguf_permutes_q_and_k_rows(tmp_path):
    """A Llama with ternary projections (as tritnum.torch trains them) in llama.cpp's layout."""
    def fp16_scale(name, w):
        t = tn.quantize(w)
        return tn.TernaryTensor(t.packed, np.float32(np.float16(t.scales)))  # TQ's float16

    config, model, tensors = ternary_llama(2, fp16_scale)
    report = tn.io.llama_to_gguf(tmp_path / "llama.gguf", tensors, config.to_dict())
    assert report.counts()["TQ2_0"] == 14
    reader = gguf.GGUFReader(tmp_path / "llama.gguf")
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.attention.head_count_kv") == 2
    assert _field(reader, "llama.rope.freq_base") == 10000.0
    file = dequantized(reader)
    assert "output.weight" in file and "blk.1.ffn_gate.weight" in file
    ours = llama_cpp_forward(file, TOKENS, 4, 2, 2, 10000.0, 1e-6)
    with torch.no_grad():
        theirs = model(torch.from_numpy(TOKENS)).logits[0].double().numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-4 * np.abs(theirs).max())
    # the file's q rows are the model's, permuted within each head: pairs of the two halves
    q = tensors["model.layers.0.self_attn.q_proj.weight"].dequantize()
    np.testing.assert_array_equal(file["blk.0.attn_q.weight"][:4], q[[0, 32, 1, 33]])
    config_bad = {**config.to_dict(), "hidden_act": "gelu"}
    with pytest.raises(FormatError, match="silu"):
        tn.io.llama_to_gguf(tmp_path / "bad.gguf", tensors, config_bad)
    with pytest.raises(FormatError, match=r"no place.*model\.layers\.0\.mlp\.extra\.weight"):
        tn.io.llama_to_gguf(tmp_path / "bad.gguf",
                            {**tensors, "model.layers.0.mlp.extra.weight": np.ones(4)},
                            config.to_dict())


def test_tritnum_torch_model_to_llama_gguf(tmp_path):
    """A Llama converted with tritnum.torch (float activations, float16 scales: TQ's), exported
    and written by llama_to_gguf: a NumPy pass over the file gives the converted model's logits."""
    tt = pytest.importorskip("tritnum.torch")
    torch.manual_seed(3)
    config = llama_config()
    model = transformers.LlamaForCausalLM(config).float()
    tt.convert(model, activations="float", scale_dtype="float16").eval()
    tn.io.llama_to_gguf(tmp_path / "m.gguf", tt.export(model), config.to_dict())
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    file = dequantized(reader)
    assert {t.tensor_type.name for t in reader.tensors if "ffn_up" in t.name} == {"TQ2_0"}
    ours = llama_cpp_forward(file, TOKENS, 4, 2, 2, 10000.0, 1e-6)
    with torch.no_grad():
        theirs = model(torch.from_numpy(TOKENS)).logits[0].double().numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-4 * np.abs(theirs).max())


def test_hf_llama_bitnet_checkpoint_is_llamas(tmp_path):
    """A Llama checkpoint in transformers' bitnet format (HF1BitLLM's kind: model_type llama,
    bitlinear scales) converts to llama.cpp's llama architecture, Q/K rows permuted as each
    projection is read: a NumPy pass over the file gives the float Llama of the same weights."""
    config, model, tensors = ternary_llama(5, lambda name, w: tn.TernaryTensor(
        tn.pack(np.random.default_rng(len(name)).integers(-1, 2, w.shape)),
        np.float32(2.0 ** -(4 + len(name) % 3))))  # bitlinear's 1 / scale exact in bfloat16
    settings = {"quant_method": "bitnet", "linear_class": "bitlinear"}
    tn.io.write_hf_bitnet(tmp_path / "hf", tensors, {**config.to_dict(),
                                                     "quantization_config": settings})
    tn.io.convert(tmp_path / "hf", tmp_path / "m.gguf", tokenizer=False)
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    assert _field(reader, "general.architecture") == "llama"
    file = dequantized(reader)
    ours = llama_cpp_forward(file, TOKENS, 4, 2, 2, 10000.0, 1e-6)
    with torch.no_grad():
        theirs = model(torch.from_numpy(TOKENS)).logits[0].double().numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-4 * np.abs(theirs).max())
    rms = json.loads((tmp_path / "hf" / "config.json").read_text())
    rms["quantization_config"]["use_rms_norm"] = True  # a norm inside each projection
    (tmp_path / "hf" / "config.json").write_text(json.dumps(rms))
    with pytest.raises(FormatError, match=r"use_rms_norm.*llama architecture"):
        tn.io.convert(tmp_path / "hf", tmp_path / "rms.gguf", tokenizer=False)
    rms["model_type"] = "bitnet"
    (tmp_path / "hf" / "config.json").write_text(json.dumps(rms))
    with pytest.raises(FormatError, match=r"use_rms_norm.*bitnet architecture"):
        tn.io.convert(tmp_path / "hf", tmp_path / "rms.gguf", tokenizer=False)
    assert sorted(os.listdir(tmp_path)) == ["hf", "m.gguf"]
