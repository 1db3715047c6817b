"""GGUF files through the gguf package, and tritnum's own .npz files."""

import json
import os
import struct

import gguf
import numpy as np
import pytest
from hypothesis import given

import tritnum as tn
from tritnum.testing import ternary_tensors


def ternary(shape=(3, 512), seed=0, **mode):
    return tn.quantize(np.random.default_rng(seed).standard_normal(shape), **mode)


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0"])
def test_gguf_file_round_trip(qtype, tmp_path):
    path = tmp_path / "model.gguf"
    tensors = {"blk.0.attn_q.weight": ternary(axis=-1), "blk.0.ffn_up.weight": ternary(seed=1),
               "output_norm.weight": np.linspace(0, 1, 8, dtype=np.float32)}
    tn.io.write_gguf(path, tensors, qtype=qtype)

    reader = gguf.GGUFReader(path)  # the gguf package's own view of the file
    seen = {t.name: t for t in reader.tensors}
    assert set(seen) == set(tensors)
    for name in ("blk.0.attn_q.weight", "blk.0.ffn_up.weight"):
        t = seen[name]
        assert t.tensor_type == getattr(gguf.GGMLQuantizationType, qtype)
        assert tuple(reversed(t.shape.tolist())) == (3, 512)
        np.testing.assert_array_equal(np.asarray(t.data).reshape(-1),
                                      tn.io.to_gguf_blocks(tensors[name], qtype).reshape(-1))
    np.testing.assert_array_equal(seen["output_norm.weight"].data, tensors["output_norm.weight"])

    back = tn.io.read_gguf(path, format="bitplane")
    assert list(back) == list(tensors)
    for name in ("blk.0.attn_q.weight", "blk.0.ffn_up.weight"):
        assert back[name].format == "bitplane" and back[name].group_size == 256
        np.testing.assert_array_equal(back[name].packed.unpack(), tensors[name].packed.unpack())
        np.testing.assert_array_equal(
            tn.io.to_gguf_blocks(back[name], qtype), tn.io.to_gguf_blocks(tensors[name], qtype))
    np.testing.assert_array_equal(back["output_norm.weight"], tensors["output_norm.weight"])


def test_i2s_file_round_trip(tmp_path):
    """gguf does not know I2_S (type 36): tritnum writes and reads it itself."""
    path = tmp_path / "bitnet.gguf"
    w = ternary((4, 256))
    tn.io.write_gguf(path, {"w": w, "b": np.arange(3, dtype=np.int32)}, qtype="I2_S")
    with pytest.raises(ValueError, match="36"):
        gguf.GGUFReader(path)
    back = tn.io.read_gguf(path)
    assert back["w"].group_size is None and back["w"].scales == w.scales
    np.testing.assert_array_equal(back["w"].packed.unpack(), w.packed.unpack())
    np.testing.assert_array_equal(back["b"], np.arange(3))
    raw = path.read_bytes()
    encoded = tn.io.to_gguf_blocks(w, "I2_S").tobytes()
    assert raw.count(encoded) == 1  # the bytes bitnet.cpp expects, verbatim


def test_many_tensors_show_progress(tmp_path, capsys):
    path = tmp_path / "many.gguf"
    tn.io.write_gguf(path, {f"t{i}": ternary((1, 256), seed=i) for i in range(3)},
                     progress=True)
    assert len(tn.io.read_gguf(path, progress=True)) == 3
    assert "tensor" in capsys.readouterr().err


def test_corrupt_gguf(tmp_path):
    good = tmp_path / "good.gguf"
    tn.io.write_gguf(good, {"w": ternary()})
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(good.read_bytes()[:100])
    with pytest.raises(tn.FormatError, match="cannot read GGUF file"):
        tn.io.read_gguf(truncated)
    with pytest.raises(tn.FormatError, match="qtype must be one of"):
        tn.io.write_gguf(tmp_path / "x.gguf", {}, qtype="Q8_0")


@pytest.mark.parametrize("fmt", list(tn.FORMATS))
def test_npz_round_trip(fmt, tmp_path):
    t = ternary((5, 70), group_size=7)
    t = tn.TernaryTensor(t.packed.to(fmt), t.scales, 7)
    p = tn.pack(np.random.default_rng(2).integers(-1, 2, (3, 2, 9)), fmt)
    tn.save(tmp_path / "one.npz", t)
    back = tn.load(tmp_path / "one.npz")
    assert isinstance(back, tn.TernaryTensor) and back.packed == t.packed
    np.testing.assert_array_equal(back.scales, t.scales)
    assert back.group_size == 7
    tn.save(tmp_path / "many.npz", {"t": t, "p": p, "row": ternary((2, 8), axis=-1)})
    many = tn.load(tmp_path / "many.npz")
    assert set(many) == {"t", "p", "row"} and many["p"] == p and many["row"].group_size == 8
    with np.load(tmp_path / "many.npz", allow_pickle=False) as f:  # plain arrays, no pickle
        assert json.loads(str(f["__tritnum__"][()]))["version"] == 2
    tn.save(str(tmp_path / "weights.NPZ"), p)  # at this path exactly: no ".npz" appended
    assert tn.load(str(tmp_path / "weights.NPZ")) == p
    with pytest.raises(tn.FormatError, match=r"must be one of '\.npz', '\.safetensors', got ''"):
        tn.save(str(tmp_path / "weights"), p)  # the extension picks the format


PLAIN = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "float16", "float32", "float64"]


def test_npz_keeps_plain_arrays_next_to_ternary_ones(tmp_path):
    rng = np.random.default_rng(3)
    arrays = {d: (rng.standard_normal((3, 4)) * 100).astype(d) for d in PLAIN}
    arrays["float32"].flat[:2] = [np.nan, -0.0]
    arrays.update(big_endian=np.arange(6, dtype=">i4").reshape(2, 3),
                  strided=np.arange(20.0).reshape(4, 5)[::2, ::-2],
                  scalar=np.float16(1.5), empty=np.zeros((0, 3), np.uint8))
    w = ternary((4, 8), group_size=4)
    path = tmp_path / "model.npz"
    tn.save(path, {"w": w, **arrays})
    back = tn.load(path)
    assert back["w"].packed == w.packed
    for name, a in arrays.items():
        want = np.asarray(a, np.asarray(a).dtype.newbyteorder("<"), order="C")  # little-endian
        assert back[name].dtype == want.dtype and back[name].shape == want.shape
        bits = f"u{want.dtype.itemsize}"  # NaN and -0.0 bit for bit
        np.testing.assert_array_equal(back[name].view(bits), want.view(bits))
    with np.load(path, allow_pickle=False) as f:  # still plain arrays, still no pickle
        assert set(f.files) == {"__tritnum__", "w/data", "w/scales",
                                *(f"{name}/array" for name in arrays)}
    tn.save(path, np.arange(3))  # one array on its own
    np.testing.assert_array_equal(tn.load(path), np.arange(3))


def test_npz_reads_torch_tensors_bfloat16_as_float32(tmp_path):
    torch = pytest.importorskip("torch")
    t = torch.randn(3, 5).bfloat16()
    tn.save(tmp_path / "t.npz", {"emb": t, "g": torch.ones(2, requires_grad=True)})
    back = tn.load(tmp_path / "t.npz")
    assert back["emb"].dtype == np.float32
    np.testing.assert_array_equal(back["emb"], t.float().numpy())  # exact: a wider float
    np.testing.assert_array_equal(back["g"], np.ones(2, np.float32))


@pytest.mark.parametrize("value, match", [
    ([1.0, 2.0], "'a' is a list"), (np.array(["x"]), "array of <U1"),
    (np.array([{}], object), "array of object"), (np.ones(2, np.complex128), "complex128"),
    (np.ones(2, np.longdouble), "float128|longdouble"), ({"x": 1}, "'a' is a dict")])
def test_npz_refuses_what_it_cannot_hold_without_pickle(value, match, tmp_path):
    with pytest.raises(TypeError, match=match):
        tn.save(tmp_path / "x.npz", {"a": value})


def test_npz_of_format_version_1_still_loads(tmp_path):
    path = tmp_path / "v1.npz"
    p = tn.pack([1, 0, -1])
    np.savez(path, __tritnum__=np.array(json.dumps(
        {"version": 1, "single": True, "items": {"": {"shape": [3], "format": "2bit"}}})),
        **{"/data": p.data})
    assert tn.load(path) == p


def test_npz_bad_files(tmp_path):
    path = tmp_path / "t.npz"
    tn.save(path, tn.pack([1, 0, -1]))
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(path.read_bytes()[:50])
    not_ours = tmp_path / "plain.npz"
    np.savez(not_ours, a=np.zeros(3))
    for bad in (truncated, not_ours):
        with pytest.raises(tn.FormatError, match="not a readable tritnum file"):
            tn.load(bad)
    future = tmp_path / "future.npz"
    np.savez(future, __tritnum__=np.array(json.dumps({"version": 99, "single": True,
                                                      "items": {}})))
    with pytest.raises(tn.FormatError, match="version 99"):
        tn.load(future)
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, __tritnum__=np.array(json.dumps(
        {"version": 1, "single": True, "items": {"": {"shape": [10], "format": "2bit"}}})),
        **{"/data": np.zeros(2, np.uint8)})
    with pytest.raises(tn.FormatError):
        tn.load(wrong)
    with pytest.raises(TypeError, match="save takes"):
        tn.save(path, [0.0, 0.0])


@given(t=ternary_tensors())
def test_npz_round_trips_any_ternary_tensor(t, tmp_path_factory):
    path = tmp_path_factory.mktemp("npz") / "t.npz"
    tn.save(path, t)
    back = tn.load(path)
    assert back.packed == t.packed and back.group_size == t.group_size
    np.testing.assert_array_equal(back.scales, t.scales)


READERS = {
    "tn.load npz": lambda p: tn.load(p.with_suffix(".npz")),
    "tn.load safetensors": lambda p: tn.load(p.with_suffix(".safetensors")),
    "read_safetensors": lambda p: tn.io.read_safetensors(p),
    "read_gguf": lambda p: tn.io.read_gguf(p),
    "quantize_gguf": lambda p: tn.io.quantize_gguf(p, p.parent.parent / "out.gguf"),
    "ItemMemory.load": lambda p: tn.vsa.ItemMemory.load(p.with_suffix(".npz")),
}


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_raises_the_os_error_of_a_file_it_cannot_open(reader, tmp_path):
    # a missing file, a directory, a path through a file: the OSError itself, never a
    # FormatError (a ValueError), so `except OSError` and `except FileNotFoundError` work
    read = READERS[reader]
    with pytest.raises(FileNotFoundError):
        read(tmp_path / "missing" / "x")
    folder = tmp_path / "folder"
    for suffix in (".npz", ".safetensors", ""):
        (folder / ("x" + suffix)).mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        read(folder / "x")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        read(tmp_path / "file" / "x")
    if hasattr(os, "geteuid") and os.geteuid() != 0:  # root may read anything
        locked = tmp_path / "locked"
        locked.mkdir()
        for suffix in (".npz", ".safetensors", ""):
            (locked / ("x" + suffix)).write_bytes(b"\0" * 64)
            os.chmod(locked / ("x" + suffix), 0)
        with pytest.raises(PermissionError):
            read(locked / "x")
    assert not (tmp_path / "out.gguf").exists()


def test_tn_load_of_a_gguf_file_names_the_gguf_reader(tmp_path):
    path = tmp_path / "model.gguf"
    tn.io.write_gguf(path, {"w": np.ones(4, np.float32)})
    with pytest.raises(tn.FormatError, match=r"'\.gguf' \(for GGUF files use tn\.io\.read_gguf"):
        tn.load(path)
    with pytest.raises(tn.FormatError, match=r"use tn\.io\.write_gguf"):
        tn.save(tmp_path / "out.GGUF", {"w": np.ones(4, np.float32)})
    assert not (tmp_path / "out.GGUF").exists()


def test_a_tq_row_length_error_says_what_i2s_takes():
    w = np.ones((2, 128), np.float32)
    with pytest.raises(tn.ShapeMismatchError, match="I2_S takes any row length"):
        tn.io.to_gguf_blocks(w, "TQ2_0")
    assert tn.io.from_gguf_blocks(tn.io.to_gguf_blocks(w, "I2_S"), "I2_S", w.shape).shape == w.shape


def test_write_gguf_writes_the_values_of_any_layout(tmp_path):
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    path = tmp_path / "views.gguf"
    views = {"t": w.T, "strided": w[:, ::2], "reversed": w[::-1], "i32": w.astype(np.int32).T,
             "f16": w.T.astype(np.float16).T[::-1], "big": w.astype(">f4").T}
    tn.io.write_gguf(path, views)
    back = tn.io.read_gguf(path)
    for name, v in views.items():
        np.testing.assert_array_equal(back[name], v, err_msg=name)
        assert back[name].shape == v.shape
    tn.io.write_gguf(path, {"bf16": w[:, ::-1]}, qtype="BF16")
    np.testing.assert_array_equal(tn.io.read_gguf(path)["bf16"], w[:, ::-1])


def test_write_gguf_of_empty_tensors(tmp_path):
    # llama.cpp's reader divides by every dimension but ne[0] (the NumPy last axis):
    # an empty tensor is written when only its rows are empty, refused otherwise
    path = tmp_path / "empty.gguf"
    empty = {"f": np.zeros((4, 0), np.float32), "i": np.zeros((3, 0), np.int8),
             "v": np.zeros(0, np.float16), "t": tn.quantize(np.zeros((4, 0), np.float32))}
    for qtype in ("TQ2_0", "TQ1_0", "I2_S"):
        tn.io.write_gguf(path, empty, qtype={"t": qtype})
        back = tn.io.read_gguf(path)
        for name in ("f", "i", "v"):
            assert back[name].shape == empty[name].shape and back[name].dtype == empty[name].dtype
        assert back["t"].dequantize().shape == (4, 0), qtype
    for shape in [(0, 4), (2, 0, 3), (0, 256)]:
        with pytest.raises(tn.FormatError, match=r"empty along an axis other than the last"):
            tn.io.write_gguf(tmp_path / "refused.gguf", {"w": np.zeros(shape, np.float32)})
    assert not (tmp_path / "refused.gguf").exists()


def _gguf_with_dims(dims):
    info = (struct.pack("<Q", 1) + b"x" + struct.pack(f"<I{len(dims)}Q", len(dims), *dims)
            + struct.pack("<IQ", 0, 0))
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + info
    return head + bytes(-len(head) % 32)


def _safetensors_with_shape(shape):
    header = json.dumps({"x": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}})
    return struct.pack("<Q", len(header)) + header.encode()


@pytest.mark.parametrize("dims", [[0, 2**62, 2**62], [2**63, 0], [2**64 - 1, 0, 3],
                                  [1] * 65 + [0], [0] * 70])
def test_a_shape_numpy_cannot_hold_is_a_format_error(dims, tmp_path):
    gg, st = tmp_path / "x.gguf", tmp_path / "x.safetensors"
    gg.write_bytes(_gguf_with_dims(dims))
    st.write_bytes(_safetensors_with_shape(dims))
    with pytest.raises(tn.FormatError, match="NumPy"):
        tn.io.read_gguf(gg)
    with pytest.raises(tn.FormatError, match="NumPy"):
        tn.io.read_safetensors(st)


def test_an_empty_tensor_with_per_group_scales_is_refused_when_made_or_read(tmp_path):
    from safetensors.numpy import save_file
    packed = tn.pack(np.zeros((4, 0), np.int8))
    with pytest.raises(tn.ShapeMismatchError, match="non-empty last axis"):
        tn.TernaryTensor(packed, np.zeros((4, 0), np.float32), 256)
    path = tmp_path / "e.safetensors"
    save_file({"w.tritnum.packed": np.zeros((4, 0), np.uint8),
               "w.tritnum.scales": np.zeros((4, 0), np.float32)}, str(path),
              metadata={"w.tritnum": json.dumps({"shape": [4, 0], "format": "2bit",
                                                 "group_size": 256}),
                        "tritnum.format_version": "1"})
    with pytest.raises(tn.FormatError, match="non-empty last axis"):
        tn.io.read_safetensors(path)
    tn.save(path, {"w": tn.quantize(np.zeros((4, 0), np.float32))})  # one scale: fine
    assert tn.load(path)["w"].dequantize().shape == (4, 0)


def test_quantize_gguf_keeps_empty_tensors_and_checks_split_count(tmp_path):
    src, dst = tmp_path / "src.gguf", tmp_path / "dst.gguf"
    tn.io.write_gguf(src, {"blk.0.attn_q.weight": np.zeros((4, 0), np.float16),
                           "blk.0.attn_k.weight": np.ones((4, 256), np.float32)})
    for qtype in ("TQ2_0", "I2_S"):
        report = tn.io.quantize_gguf(src, dst, qtype=qtype)
        assert report.tensors["blk.0.attn_q.weight"].qtype == "F16"
        assert "empty" in report.tensors["blk.0.attn_q.weight"].note
        back = tn.io.read_gguf(dst)
        assert back["blk.0.attn_q.weight"].shape == (4, 0)
        assert back.qtypes["blk.0.attn_k.weight"] == qtype
    for bad in ("2", 2.0, [2], True):
        tn.io.write_gguf(src, {"w": np.ones(3, np.float32)}, metadata={"split.count": bad})
        with pytest.raises(tn.FormatError, match=r"split\.count is of type"):
            tn.io.quantize_gguf(src, dst)
    dst.unlink()
    tn.io.write_gguf(src, {"w": np.ones(3, np.float32)},
                     metadata={"split.count": tn.io.GGUFValue("uint16", 1)})
    tn.io.quantize_gguf(src, dst)  # one shard: the whole model
    assert dst.exists()


def test_gguf_blocks_refuse_a_negative_or_non_integer_shape():
    data = np.zeros(34, np.uint8)
    with pytest.raises(tn.ShapeMismatchError, match="negative"):
        tn.io.GGUFBlocks(data, "Q8_0", (-1, 32))
    with pytest.raises(TypeError, match="tuple of ints"):
        tn.io.GGUFBlocks(data, "Q8_0", (1.5, 32))
    assert tn.io.GGUFBlocks(data, "Q8_0", (np.int64(1), 32)).shape == (1, 32)


def test_save_refuses_a_name_an_npz_member_cannot_hold(tmp_path):
    path = tmp_path / "long.npz"
    for name in ("x" * 100_000, "é" * 32_763, "a\udc80"):
        with pytest.raises(ValueError, match=r"name .*(bytes in UTF-8|not valid Unicode)"):
            tn.save(path, {name: np.ones(2)})
        assert not path.exists()
    longest = "x" * (65535 - len("/scales.npy"))
    tn.save(path, {longest: tn.quantize(np.ones((2, 4)), axis=-1)})
    assert list(tn.load(path)) == [longest]
