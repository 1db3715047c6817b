"""quantize_gguf: a tiny llama-architecture model written by the gguf package, quantized, and
read back by the gguf package: every key intact, llama.cpp's tensor choice, and each quantized
tensor byte for byte the gguf package's own quantization (byte-identical to llama.cpp's)."""

import os

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants

import tritnum as tn
from tritnum.io.gguf import quantize as gguf_quantize

N_EMBD, N_FF, N_HEAD, N_KV, N_LAYER, N_VOCAB = 256, 512, 4, 2, 2, 64
HEAD_DIM = N_EMBD // N_HEAD


def llama_tensors(rng, dtype):
    """The tensors of a llama model (NumPy shapes: (out, in)), in llama.cpp's names."""
    def w(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(dtype)

    tensors = {"token_embd.weight": w(N_VOCAB, N_EMBD)}
    for i in range(N_LAYER):
        tensors.update({
            f"blk.{i}.attn_norm.weight": np.ones(N_EMBD, np.float32),
            f"blk.{i}.attn_q.weight": w(N_EMBD, N_EMBD),
            f"blk.{i}.attn_k.weight": w(N_KV * HEAD_DIM, N_EMBD),
            f"blk.{i}.attn_v.weight": w(N_KV * HEAD_DIM, N_EMBD),
            f"blk.{i}.attn_output.weight": w(N_EMBD, N_EMBD),
            f"blk.{i}.ffn_norm.weight": np.ones(N_EMBD, np.float32),
            f"blk.{i}.ffn_gate.weight": w(N_FF, N_EMBD),
            f"blk.{i}.ffn_up.weight": w(N_FF, N_EMBD),
            f"blk.{i}.ffn_down.weight": w(N_EMBD, N_FF),
        })
    tensors["output_norm.weight"] = np.ones(N_EMBD, np.float32)
    tensors["output.weight"] = w(N_VOCAB, N_EMBD)
    return tensors


def write_llama(path, dtype=np.float16, bf16=False, extra=(), endian=gguf.GGUFEndian.LITTLE):
    """A tiny llama model as llama.cpp's convert_hf_to_gguf.py writes one (the metadata
    llama.cpp requires to load it), random weights, through the gguf package (in the byte
    order ``endian``: big-endian BF16 as gguf_convert_endian.py swaps it, per element)."""
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(path, "llama", endianess=endian)
    w.add_name("tiny-llama")
    w.add_context_length(128)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(N_VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if bf16 else gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"<tok{i}>" for i in range(N_VOCAB)])
    w.add_token_scores(np.linspace(0, -1, N_VOCAB, dtype=np.float32).tolist())
    w.add_token_types([1] * N_VOCAB)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_quantization_version(2)
    tensors = {**llama_tensors(rng, np.float32 if bf16 else dtype), **dict(extra)}
    for name, value in tensors.items():
        if bf16 and value.ndim == 2:
            bits = quants.quantize(value, T.BF16)  # uint8: the writer would not swap them
            if endian == gguf.GGUFEndian.BIG:
                bits = bits.view(np.uint16).byteswap().view(np.uint8)
            w.add_tensor(name, bits, raw_dtype=T.BF16)
        else:
            w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read(path):
    r = gguf.GGUFReader(path)
    return r, {t.name: t for t in r.tensors}


def field_bytes(field):
    return field.types, [p.tobytes() for p in field.parts[2:]]  # after the key


QUANTIZED = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0"])
@pytest.mark.parametrize("source", ["F16", "F32", "BF16"])
def test_llama_model_quantized_as_llama_cpp(tmp_path, qtype, source):
    src, dst = tmp_path / "src.gguf", tmp_path / "dst.gguf"
    write_llama(src, np.float32 if source == "F32" else np.float16, bf16=source == "BF16")
    report = tn.io.quantize_gguf(src, dst, qtype, progress=False)

    before, src_tensors = read(src)
    after, dst_tensors = read(dst)
    assert list(after.fields) == list(before.fields)  # every key, in order
    for key, field in before.fields.items():
        if key in ("general.file_type",) or key.startswith("GGUF."):
            continue
        assert field_bytes(after.fields[key]) == field_bytes(field), key
    assert after.fields["general.file_type"].contents() == {"TQ1_0": 36, "TQ2_0": 37}[qtype]
    assert after.fields["general.file_type"].types == [gguf.GGUFValueType.UINT32]
    assert after.fields["general.quantization_version"].contents() == 2

    assert list(dst_tensors) == list(src_tensors)  # the same order
    kind = getattr(T, qtype)
    for name, s in src_tensors.items():
        d = dst_tensors[name]
        if name.split(".")[-2] in QUANTIZED:
            assert d.tensor_type == kind, name
            values = (quants.dequantize(s.data, T.BF16) if source == "BF16"
                      else np.asarray(s.data, np.float32))
            np.testing.assert_array_equal(d.data, quants.quantize(values, kind), name)
            assert report.tensors[name].qtype == qtype
        else:  # token embeddings, norms, output: passed through
            assert d.tensor_type == s.tensor_type and d.data.tobytes() == s.data.tobytes()
    notes = {n: r.note for n, r in report.tensors.items()}
    assert notes["token_embd.weight"].startswith("token embeddings")
    assert notes["output.weight"].startswith("output layer")
    assert notes["blk.0.attn_norm.weight"] == "1-D"


def test_include_and_exclude(tmp_path):
    src, dst = tmp_path / "src.gguf", tmp_path / "dst.gguf"
    odd = np.random.default_rng(1).standard_normal((8, 320)).astype(np.float16)
    flat = np.ones((1, 512), np.float16)
    write_llama(src, extra={"blk.0.odd.weight": odd, "blk.0.row.weight": flat,
                            "blk.0.attn_q.bias": np.ones((4, 256), np.float16)})
    report = tn.io.quantize_gguf(src, dst, include=["output.weight", "*.odd.weight"],
                                 exclude=lambda name: name.startswith("blk.1."))
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(dst).tensors}
    assert types["output.weight"] == T.TQ2_0  # asked for
    assert types["token_embd.weight"] == T.F16
    assert types["blk.0.odd.weight"] == T.F16  # asked for, but 320 is not a multiple of 256
    assert report.tensors["blk.0.odd.weight"].note == "row length 320 is not a multiple of 256"
    assert types["blk.0.row.weight"] == T.F16 and report.tensors["blk.0.row.weight"].note == "1-D"
    assert types["blk.0.attn_q.bias"] == T.F16
    assert report.tensors["blk.0.attn_q.bias"].note == "not a weight"
    assert types["blk.1.ffn_up.weight"] == T.F16
    assert report.tensors["blk.1.ffn_up.weight"].note == "excluded"
    assert types["blk.0.ffn_up.weight"] == T.TQ2_0


def test_rules_follow_llama_cpp():
    rule = gguf_quantize._name_rule
    assert rule("blk.0.ffn_gate_inp.weight") == "llama.cpp keeps 'ffn_gate_inp.weight' tensors"
    assert rule("blk.3.attn_norm.weight") == "a norm"
    assert rule("position_embd.weight") == "position embeddings"
    assert rule("blk.0.time_mix_w1.weight") is not None
    assert rule("blk.0.ffn_down_exps.weight") is None  # experts are quantized
    assert rule("v.blk.0.attn_q.weight") is None


def bitnet_i2s(values):
    """bitnet.cpp's quantize_i2_s, x86 ACT_PARALLEL build, in NumPy (see test_gguf_i2s)."""
    x = values.astype(np.float64).reshape(-1)
    codes = np.where(np.abs(x) < 1e-6, 1, np.where(x > 0, 2, 0)).astype(np.uint8)
    c = codes.reshape(-1, 4, 32)
    qs = (c[:, 0] << 6 | c[:, 1] << 4 | c[:, 2] << 2 | c[:, 3]).reshape(-1)
    tail = np.zeros(32, np.uint8)
    tail[:4] = np.array([np.abs(x).max()], np.float32).view(np.uint8)
    return np.concatenate([qs, tail])


def test_i2s_model(tmp_path):
    src, dst = tmp_path / "src.gguf", tmp_path / "dst.gguf"
    write_llama(src, np.float32)
    report = tn.io.quantize_gguf(src, dst, "I2_S", progress=False)
    model = tn.io.read_gguf(dst)
    assert model.metadata["general.file_type"].value == 40  # LLAMA_FTYPE_MOSTLY_I2_S
    raw = dst.read_bytes()
    _, src_tensors = read(src)
    for name, r in report.tensors.items():
        if r.qtype == "I2_S":
            assert raw.count(bitnet_i2s(np.asarray(src_tensors[name].data)).tobytes()) == 1
    assert sum(r.qtype == "I2_S" for r in report.tensors.values()) == 7 * N_LAYER


def test_chunks_give_the_same_file(tmp_path, monkeypatch):
    src = tmp_path / "src.gguf"
    write_llama(src)
    for qtype, layout in (("TQ1_0", "x86"), ("I2_S", "x86-interleaved"), ("I2_S", "arm")):
        tn.io.quantize_gguf(src, tmp_path / "whole.gguf", qtype, layout=layout)
        with monkeypatch.context() as m:
            m.setattr(gguf_quantize, "CHUNK_BYTES", 4 * 256 * 3)  # 3 rows of 256 at a time
            tn.io.quantize_gguf(src, tmp_path / "rows.gguf", qtype, layout=layout)
        assert (tmp_path / "rows.gguf").read_bytes() == (tmp_path / "whole.gguf").read_bytes()


def test_kept_tensors_copied_without_copy_file_range(tmp_path, monkeypatch):
    """Where the kernel cannot copy between the files, the bytes are read and written."""
    src = tmp_path / "src.gguf"
    write_llama(src)
    tn.io.quantize_gguf(src, tmp_path / "kernel.gguf")

    def unsupported(*args):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    monkeypatch.setattr(gguf_quantize, "CHUNK_BYTES", 1000)
    tn.io.quantize_gguf(src, tmp_path / "copied.gguf")
    assert (tmp_path / "copied.gguf").read_bytes() == (tmp_path / "kernel.gguf").read_bytes()


def test_refusals(tmp_path):
    src, dst = tmp_path / "src.gguf", tmp_path / "dst.gguf"
    big = np.full((2, 256), 1e5, np.float32)
    tn.io.write_gguf(src, {"blk.0.ffn_up.weight": big})
    with pytest.raises(tn.FormatError, match=r"'blk.0.ffn_up.weight', rows 0..1: 2 of its 2 "
                                             "block maxima .* reach 65520 or more"):
        tn.io.quantize_gguf(src, dst)
    nan = np.ones((2, 256), np.float32)
    nan[1, 7] = np.nan
    tn.io.write_gguf(src, {"blk.0.ffn_up.weight": nan})
    with pytest.raises(ValueError, match=r"rows 0..1: x\[1, 7\] = nan is not finite"):
        tn.io.quantize_gguf(src, dst)
    tn.io.write_gguf(src, {}, metadata={"split.count": tn.io.GGUFValue("uint16", 2)})
    with pytest.raises(tn.FormatError, match="split in 2 files"):
        tn.io.quantize_gguf(src, dst)
    with pytest.raises(FileNotFoundError):  # an OSError, raised unchanged
        tn.io.quantize_gguf(tmp_path / "missing.gguf", dst)
    assert not dst.exists() and sorted(os.listdir(tmp_path)) == ["src.gguf"]


def test_float64_tensors_become_float32(tmp_path):
    src, dst = tmp_path / "src.gguf", tmp_path / "dst.gguf"
    w = gguf.GGUFWriter(src, "llama")
    w.add_tensor("rope_freqs.weight", np.linspace(0, 1, 8))  # F64, as some converters write
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tn.io.quantize_gguf(src, dst)
    t = gguf.GGUFReader(dst).tensors[0]
    assert t.tensor_type == T.F32
    np.testing.assert_array_equal(t.data, np.linspace(0, 1, 8).astype(np.float32))


BIG = gguf.GGUFEndian.BIG
PLAIN_EXTRA = {"rope_freqs.weight": np.linspace(-2, 2, 64),  # F64: written as F32
               "pos.weight": np.arange(-300, 300, 7, dtype=np.int16),
               "blk.0.attn_q.bias": np.linspace(-1, 1, 256, dtype=np.float16)}


@pytest.mark.parametrize("source", ["F16", "F32", "BF16"])
def test_big_endian_file_quantizes_as_the_little_endian_one(tmp_path, source):
    """A big-endian file (the gguf package writes them) is read in its byte order: the output
    (little-endian) is byte for byte the one from the same little-endian file, and both
    read_gguf and gguf's reader find the source's values in it."""
    dtype, bf16 = (np.float32 if source == "F32" else np.float16), source == "BF16"
    le, be = tmp_path / "le.gguf", tmp_path / "be.gguf"
    write_llama(le, dtype, bf16, extra=PLAIN_EXTRA)
    write_llama(be, dtype, bf16, extra=PLAIN_EXTRA, endian=BIG)
    assert gguf.GGUFReader(be).endianess == BIG
    for path in (le, be):
        tn.io.quantize_gguf(path, tmp_path / f"{path.stem}.tq2.gguf", "TQ2_0", progress=False)
    out = tmp_path / "be.tq2.gguf"
    assert out.read_bytes() == (tmp_path / "le.tq2.gguf").read_bytes()

    values = tn.io.read_gguf(be)  # the big-endian source, read in its byte order
    assert values.metadata == tn.io.read_gguf(le).metadata
    back, (reader, tensors) = tn.io.read_gguf(out), read(out)
    assert reader.endianess == gguf.GGUFEndian.LITTLE
    assert reader.fields["llama.context_length"].contents() == 128
    quantized = 0
    for name, want in values.items():
        t, want = tensors[name], np.asarray(want)
        if t.tensor_type == T.TQ2_0:
            quantized += 1
            expect = quants.dequantize(quants.quantize(want.astype(np.float32), T.TQ2_0), T.TQ2_0)
            np.testing.assert_array_equal(back[name].dequantize(), expect)
            np.testing.assert_array_equal(quants.dequantize(t.data, T.TQ2_0), expect)
        else:
            if want.dtype.itemsize == 8 and want.dtype.kind == "f":  # F64 (">f8" here)
                want = want.astype(np.float32)
            np.testing.assert_array_equal(np.asarray(back[name]), want)
            got = quants.dequantize(t.data, t.tensor_type) if t.tensor_type == T.BF16 \
                else t.data
            np.testing.assert_array_equal(np.asarray(got).reshape(want.shape), want)
    assert quantized == 7 * N_LAYER
    assert values["pos.weight"][1] == -293  # not the swapped bytes' value


def test_big_endian_block_tensors_are_refused(tmp_path):
    """A kept Q8_0 tensor of a big-endian file: its blocks' float16 scales would need
    swapping per type, which tritnum does not do; refused before any file is written."""
    q8 = quants.quantize(np.ones((2, 32), np.float32), T.Q8_0)
    be = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(be, "llama", endianess=BIG)
    w.add_tensor("blk.0.attn_q.weight", np.ones((2, 256), np.float32))
    w.add_tensor("extra.q8", q8, raw_dtype=T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(tn.FormatError, match=r"'extra.q8': Q8_0 blocks in a big-endian file"):
        tn.io.quantize_gguf(be, tmp_path / "out.gguf")
    assert sorted(os.listdir(tmp_path)) == ["be.gguf"]
