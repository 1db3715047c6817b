"""Whole GGUF models through read_gguf / write_gguf: metadata of every type, tensor types,
order and alignment kept, byte for byte; and every export that would lose something refused."""

import os
import struct

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V
from gguf import quants

import tritnum as tn
from tritnum.io import GGUFValue

RNG = np.random.default_rng(0)
SCALARS = {  # GGUF value type -> a value that uses its range
    V.UINT8: 255, V.INT8: -128, V.UINT16: 65535, V.INT16: -32768, V.UINT32: 2**32 - 1,
    V.INT32: -(2**31), V.FLOAT32: 0.1, V.BOOL: True, V.UINT64: 2**64 - 1, V.INT64: -(2**63),
    V.FLOAT64: 1e300, V.STRING: "héllo ∑",
}


def gguf_package_file(path, alignment=None):
    """A file written by the gguf package's own writer: metadata of every value type,
    arrays of each, nested arrays, and tensors of many GGML types."""
    w = gguf.GGUFWriter(path, "llama")
    if alignment:
        w.data_alignment = alignment
        w.add_custom_alignment(alignment)
    for vtype, value in SCALARS.items():
        w.add_key_value(f"test.scalar.{vtype.name.lower()}", value, vtype)
        items = [value, value] if vtype != V.BOOL else [True, False, True]
        w.add_key_value(f"test.array.{vtype.name.lower()}", items, V.ARRAY, sub_type=vtype)
    w.add_key_value("test.nested.ints", [[1, 2], [3, 4, 5]], V.ARRAY)
    w.add_key_value("test.nested.strings", [["a"], ["b", "c"]], V.ARRAY)
    w.add_key_value("test.nested.deep", [[[1.5], [2.5, 3.5]]], V.ARRAY)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>" for i in range(300)])
    x = RNG.standard_normal((3, 512)).astype(np.float32)
    tensors = {
        "f32": x, "f16": x.astype(np.float16), "i8": np.arange(-5, 5, dtype=np.int8),
        "i16": np.arange(12, dtype=np.int16).reshape(3, 4), "i32": np.arange(7, dtype=np.int32),
        "i64": np.arange(2, dtype=np.int64), "three_d": RNG.standard_normal((2, 3, 4)).astype(
            np.float32),
    }
    for name, value in tensors.items():
        w.add_tensor(name, value)
    for kind in (T.BF16, T.Q8_0, T.Q4_K, T.TQ1_0, T.TQ2_0):
        if kind == T.Q4_K:  # the gguf package cannot quantize Q4_K: any 144-byte blocks are
            data = RNG.integers(0, 256, (3, 2 * 144), dtype=np.uint8)  # its bytes
            data.view(np.float16)[:, ::72] = np.float16(0.01)  # with finite scales
        else:
            data = quants.quantize(x, kind)
        w.add_tensor(kind.name.lower(), data, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("alignment", [None, 64])
def test_gguf_package_file_round_trips_byte_for_byte(tmp_path, alignment):
    src, dst = tmp_path / "src.gguf", tmp_path / "dst.gguf"
    gguf_package_file(src, alignment)
    model = tn.io.read_gguf(src)
    assert model.alignment == (alignment or 32)
    assert isinstance(model["tq2_0"], tn.TernaryTensor) and isinstance(model["f16"], np.ndarray)
    assert isinstance(model["q4_k"], tn.io.GGUFBlocks) and model.qtypes["bf16"] == "BF16"
    report = tn.io.write_gguf(dst, model)
    assert dst.read_bytes() == src.read_bytes()
    assert report.nbytes == os.path.getsize(src) and not report.requantized

    # and as the gguf package's reader sees both: every field's type and bytes, every tensor
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(dst)
    assert list(a.fields) == list(b.fields)
    for key, field in a.fields.items():
        assert field.types == b.fields[key].types
        assert [p.tobytes() for p in field.parts] == [p.tobytes() for p in b.fields[key].parts]
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors] == list(model)
    for s, d in zip(a.tensors, b.tensors, strict=True):
        assert s.tensor_type == d.tensor_type and s.data.tobytes() == d.data.tobytes()


def test_metadata_values_and_types(tmp_path):
    path = tmp_path / "src.gguf"
    gguf_package_file(path)
    meta = tn.io.read_gguf(path).metadata
    assert next(iter(meta)) == "general.architecture"
    for vtype, value in SCALARS.items():
        got = meta[f"test.scalar.{vtype.name.lower()}"]
        assert got.type == vtype.name.lower()
        assert got.value == (float(np.float32(value)) if vtype == V.FLOAT32 else value)
        arr = meta[f"test.array.{vtype.name.lower()}"]
        assert arr.type == "array" and arr.item_type == vtype.name.lower()
    assert meta["test.array.string"].value == ["héllo ∑"] * 2
    nested = meta["test.nested.ints"]
    assert nested.item_type == "array"
    assert [v.value.tolist() for v in nested.value] == [[1, 2], [3, 4, 5]]
    assert nested.value[0].item_type == "int32"
    assert [v.value for v in meta["test.nested.strings"].value] == [["a"], ["b", "c"]]
    deep = meta["test.nested.deep"].value[0].value
    assert [v.value.tolist() for v in deep] == [[1.5], [2.5, 3.5]]
    assert meta["tokenizer.ggml.tokens"].value[299] == "<t299>"


def gstr(s):
    return struct.pack("<Q", len(s)) + s


def test_hand_made_metadata_round_trips(tmp_path):
    """What no writer of the gguf package makes: empty arrays, an array of arrays of
    different item types, strings that are not UTF-8; each comes back byte for byte."""
    kvs = [
        gstr(b"general.architecture") + struct.pack("<I", 8) + gstr(b"llama"),
        gstr(b"empty.u8") + struct.pack("<IIQ", 9, 0, 0),
        gstr(b"empty.strings") + struct.pack("<IIQ", 9, 8, 0),
        gstr(b"mixed") + struct.pack("<IIQ", 9, 9, 3) + struct.pack("<IQ", 0, 2) + b"\x01\x02"
        + struct.pack("<IQ", 8, 1) + gstr(b"x") + struct.pack("<IQ", 9, 0),
        gstr(b"bytes\xff") + struct.pack("<I", 8) + gstr(b"\xfe\x00not utf-8"),
        gstr(b"nan") + struct.pack("<I", 6) + struct.pack("<I", 0x7FC00001),
    ]
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)
    raw = head + bytes(-len(head) % 32)
    src, dst = tmp_path / "src.gguf", tmp_path / "dst.gguf"
    src.write_bytes(raw)
    model = tn.io.read_gguf(src)
    meta = model.metadata
    assert meta["empty.u8"] == GGUFValue("array", [], item_type="uint8")
    assert meta["empty.strings"] == GGUFValue("array", [], item_type="string")
    mixed = meta["mixed"].value
    assert [(v.item_type, len(v.value)) for v in mixed] == [("uint8", 2), ("string", 1),
                                                             ("array", 0)]
    assert meta["bytes\udcff"].value == "\udcfe\x00not utf-8"
    tn.io.write_gguf(dst, model)
    assert dst.read_bytes() == raw


def test_plain_metadata_gets_llama_types(tmp_path):
    path = tmp_path / "m.gguf"
    meta = {"llama.context_length": 4096, "delta": -3, "big": 2**40, "eps": 1e-5, "name": "m",
            "flag": True, "tokens": ["a", "b"], "types": [1, 2, 3], "scores": np.zeros(2),
            "u64": GGUFValue("uint64", 7), "np": np.int16(-2), "rows": [[1, 2], [3]]}
    tn.io.write_gguf(path, {"w": np.ones(4, np.float32)}, metadata=meta, arch="llama")
    fields = gguf.GGUFReader(path).fields
    want = {"general.architecture": V.STRING, "llama.context_length": V.UINT32,
            "delta": V.INT32, "big": V.UINT64, "eps": V.FLOAT32, "name": V.STRING,
            "flag": V.BOOL, "tokens": V.ARRAY, "types": V.ARRAY, "scores": V.ARRAY,
            "u64": V.UINT64, "np": V.INT16, "rows": V.ARRAY}
    assert {k: f.types[0] for k, f in fields.items() if not k.startswith("GGUF.")} == want
    assert fields["types"].types == [V.ARRAY, V.INT32]
    assert fields["scores"].types == [V.ARRAY, V.FLOAT64]
    assert fields["llama.context_length"].contents() == 4096
    assert next(iter(tn.io.read_gguf(path).metadata)) == "general.architecture"


@pytest.mark.parametrize("bad, error, match", [
    ({1, 2}, TypeError, "cannot infer a GGUF type"),
    ([], ValueError, "empty list has no item type"),
    ([1, "a"], TypeError, "one type"),
    (2**70, ValueError, "out of the range of a GGUF uint64"),
])
def test_bad_metadata_values(tmp_path, bad, error, match):
    with pytest.raises(error, match=match):
        tn.io.write_gguf(tmp_path / "x.gguf", {}, metadata={"k": bad})
    assert not os.listdir(tmp_path)


def test_gguf_value_checks():
    with pytest.raises(ValueError, match="out of the range of a GGUF uint8"):
        GGUFValue("uint8", 256)
    with pytest.raises(TypeError, match="must be an int"):
        GGUFValue("int32", 1.5)
    with pytest.raises(ValueError, match="beyond the range of a GGUF float32"):
        GGUFValue("float32", 1e39)
    with pytest.raises(ValueError, match="needs its item_type"):
        GGUFValue("array", [1])
    names = ("'uint8', 'int8', 'uint16', 'int16', 'uint32', 'int32', 'float32', 'bool', "
             "'string', 'array', 'uint64', 'int64', 'float64'")
    for what, make in (("value", lambda t: GGUFValue(t, 1)),
                       ("item", lambda t: GGUFValue("array", [1], item_type=t))):
        for bad in ("int128", "UINT8", 6):  # the one message of a named choice, a ValueError
            with pytest.raises(ValueError, match=rf"^GGUF {what} type must be one of {names}, "
                                                 rf"got {bad!r}$"):
                make(bad)
    with pytest.raises(TypeError, match="cannot hold float items"):
        GGUFValue("array", [1.5], item_type="int32")
    assert GGUFValue("float32", float("nan")) == GGUFValue("float32", float("nan"))
    assert GGUFValue("uint32", 1) != GGUFValue("int32", 1)


def test_write_gguf_qtypes(tmp_path):
    x = RNG.standard_normal((4, 256)).astype(np.float32)
    t = tn.quantize(x, axis=-1)
    tensors = {"t": t, "f": x, "d": x.astype(np.float64), "h": x.astype(np.float16),
               "i": np.arange(4, dtype=np.int32)}
    path = tmp_path / "q.gguf"

    def types(**kw):
        tn.io.write_gguf(path, tensors, **kw)
        return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}

    assert types() == {"t": "TQ2_0", "f": "F32", "d": "F32", "h": "F16", "i": "I32"}  # no F64
    assert types(qtype="TQ1_0") == {"t": "TQ1_0", "f": "F32", "d": "F32", "h": "F16",
                                    "i": "I32"}
    assert types(qtype="BF16")["f"] == "BF16"
    assert types(qtype={"f": "TQ2_0", "t": "F16"}) == {
        "t": "F16", "f": "TQ2_0", "d": "F32", "h": "F16", "i": "I32"}
    assert types(qtype=lambda name, v: "TQ1_0" if name in "fd" else None)["d"] == "TQ1_0"
    reader = gguf.GGUFReader(path)
    d = next(t for t in reader.tensors if t.name == "d")  # float64 quantized as llama.cpp does
    np.testing.assert_array_equal(d.data, quants.quantize(x, T.TQ1_0))
    tn.io.write_gguf(path, tensors, qtype={"f": "BF16", "t": "F32"})
    back = tn.io.read_gguf(path)
    np.testing.assert_array_equal(back["f"], quants.dequantize(quants.quantize(x, T.BF16),
                                                               T.BF16))
    np.testing.assert_array_equal(back["t"], t.dequantize())
    with pytest.raises(tn.FormatError, match="'i': a int32 tensor cannot be written as F16"):
        tn.io.write_gguf(path, tensors, qtype={"i": "F16"})
    with pytest.raises(tn.FormatError, match="'t': qtype must be one of"):
        tn.io.write_gguf(path, tensors, qtype={"t": "Q4_K"})
    with pytest.raises(ValueError, match=r"not written: \['missing'\]"):
        tn.io.write_gguf(path, tensors, qtype={"missing": "F16"})


def test_arch_and_alignment(tmp_path):
    path = tmp_path / "a.gguf"
    tn.io.write_gguf(path, {"w": np.ones(3, np.float32)}, arch="llama", alignment=128)
    reader = gguf.GGUFReader(path)
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.alignment == 128 and reader.data_offset % 128 == 0
    assert tn.io.read_gguf(path).alignment == 128
    with pytest.raises(ValueError, match=r"general\.architecture is 'llama'"):
        tn.io.write_gguf(path, tn.io.read_gguf(path), arch="qwen2")
    with pytest.raises(tn.FormatError, match="power of two"):
        tn.io.write_gguf(tmp_path / "b.gguf", {}, alignment=48)


def test_blocks_of_other_types_are_kept_and_decoded(tmp_path):
    path = tmp_path / "src.gguf"
    gguf_package_file(path)
    model = tn.io.read_gguf(path)
    q8 = model["q8_0"]
    assert q8.qtype == "Q8_0" and q8.shape == (3, 512)
    src = gguf.GGUFReader(path)
    raw = next(t for t in src.tensors if t.name == "q8_0").data
    np.testing.assert_array_equal(np.asarray(q8), quants.dequantize(raw, T.Q8_0))
    np.testing.assert_array_equal(model["bf16"], quants.dequantize(
        next(t for t in src.tensors if t.name == "bf16").data, T.BF16))


GROUPS = [32, 64, 128]


@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0"])
@pytest.mark.parametrize("group_size", GROUPS)
def test_finer_groups_are_refused_or_requantized(tmp_path, qtype, group_size):
    x = RNG.standard_normal((4, 512)).astype(np.float32)
    t = tn.quantize(x, group_size=group_size)
    path = tmp_path / "g.gguf"
    # the error re-quantizing gives, computed with the gguf package: the values tritnum's
    # ternary tensor stands for, quantized as llama.cpp would, against themselves
    values = t.dequantize()
    kind = getattr(T, qtype)
    again = quants.dequantize(quants.quantize(values, kind), kind)
    relative = np.linalg.norm((again - values).astype(np.float64)) / np.linalg.norm(values)
    with pytest.raises(tn.FormatError, match=rf"relative error {relative:.2%}".replace(
            ".", r"\.")) as info:
        tn.io.write_gguf(path, {"w": t}, qtype=qtype)
    assert f"group_size {group_size}" in str(info.value) and "'w'" in str(info.value)
    assert not path.exists()
    report = tn.io.write_gguf(path, {"w": t}, qtype=qtype, requantize=True)
    assert report.requantized["w"] == pytest.approx(relative, rel=1e-6)
    assert "re-quantized" in str(report)
    data = gguf.GGUFReader(path).tensors[0].data
    np.testing.assert_array_equal(data, quants.quantize(values, kind))


def test_groups_that_share_scales_within_blocks_are_exact(tmp_path):
    trits = RNG.integers(-1, 2, (2, 512)).astype(np.int8)
    scales = np.repeat(np.array([[0.5, 2.0], [1.0, 0.25]], np.float32), 4, axis=1)  # 64-groups
    t = tn.TernaryTensor(tn.pack(trits), scales, 64)
    report = tn.io.write_gguf(tmp_path / "x.gguf", {"w": t})
    assert not report.requantized
    back = tn.io.read_gguf(tmp_path / "x.gguf")["w"]
    np.testing.assert_array_equal(back.dequantize(), t.dequantize())


def test_per_row_scales_into_i2s(tmp_path):
    x = RNG.standard_normal((8, 256)).astype(np.float32) * np.linspace(0.1, 3, 8)[:, None]
    t = tn.quantize(x, axis=-1)
    values = t.dequantize()
    scale = np.abs(values).max()
    again = np.where(np.abs(values) < 1e-6, 0, np.sign(values)) * scale
    relative = np.linalg.norm(again - values) / np.linalg.norm(values)
    with pytest.raises(tn.FormatError, match="one scale per tensor, this tensor has per-row"):
        tn.io.write_gguf(tmp_path / "x.gguf", {"w": t}, qtype="I2_S")
    report = tn.io.write_gguf(tmp_path / "x.gguf", {"w": t}, qtype="I2_S", requantize=True)
    assert report.requantized["w"] == pytest.approx(relative, rel=1e-6)
    assert relative > 0.3
    back = tn.io.read_gguf(tmp_path / "x.gguf")["w"]
    np.testing.assert_allclose(back.dequantize(), again)
    same = tn.TernaryTensor(t.packed, np.full((8, 1), 0.5, np.float32), 256)  # equal rows
    assert not tn.io.write_gguf(tmp_path / "y.gguf", {"w": same}, qtype="I2_S").requantized


def test_float16_scale_overflow_is_refused(tmp_path):
    x = np.ones((2, 256), np.float32)
    t = tn.TernaryTensor(tn.pack(np.ones((2, 256), np.int8)),
                         np.array([[1.0], [7e4]], np.float32), 256)
    for requantize in (False, True):
        with pytest.raises(tn.FormatError, match=r"reach 65520.*requantize=True cannot help"):
            tn.io.write_gguf(tmp_path / "x.gguf", {"w": t}, requantize=requantize)
    zero_trits = tn.TernaryTensor(tn.pack(np.zeros((2, 256), np.int8)), t.scales, 256)
    tn.io.write_gguf(tmp_path / "x.gguf", {"w": zero_trits})  # a scale of no value: fine
    with pytest.raises(tn.FormatError, match=r"'f': 2 of its 2 .*block 0, x\[0, 0:256\].*"
                                             "65520 or more.*infinite"):
        tn.io.write_gguf(tmp_path / "x.gguf", {"f": x * 65520}, qtype={"f": "TQ2_0"})
    tn.io.write_gguf(tmp_path / "x.gguf", {"f": x * 65519}, qtype={"f": "TQ2_0"})
    with pytest.raises(tn.FormatError, match="beyond float16's range"):
        tn.io.write_gguf(tmp_path / "x.gguf", {"f": x * 1e5}, qtype={"f": "F16"})
    with pytest.raises(tn.FormatError, match="beyond float32's range"):
        tn.io.write_gguf(tmp_path / "x.gguf", {"d": np.full(3, 1e300)})
    assert sorted(os.listdir(tmp_path)) == ["x.gguf"]  # no partial file left behind


def test_reversed_shape_from_the_gguf_reader_is_refused(tmp_path):
    path = tmp_path / "r.gguf"
    w = tn.quantize(RNG.standard_normal((256, 512)))
    tn.io.write_gguf(path, {"w": w})
    t = gguf.GGUFReader(path).tensors[0]
    assert tuple(t.shape.tolist()) == (512, 256)  # GGUF's order: ne[0] = the row length
    with pytest.raises(tn.ShapeMismatchError, match="GGUF stores dims reversed"):
        tn.io.from_gguf_blocks(t.data, "TQ2_0", tuple(t.shape.tolist()))
    good = tn.io.from_gguf_blocks(t.data, "TQ2_0", tuple(reversed(t.shape.tolist())))
    np.testing.assert_array_equal(np.sign(good), w.packed.unpack())
    square = tn.io.to_gguf_blocks(np.ones((256, 256), np.float32), "TQ2_0")
    assert tn.io.from_gguf_blocks(square, "TQ2_0", (256, 256)).shape == (256, 256)


def test_failed_write_leaves_nothing(tmp_path):
    path = tmp_path / "keep.gguf"
    path.write_bytes(b"old")
    bad = tn.quantize(RNG.standard_normal((2, 256)), group_size=64)
    with pytest.raises(tn.FormatError):
        tn.io.write_gguf(path, {"ok": np.ones(3, np.float32), "bad": bad})
    nan = np.ones((2, 256), np.float32)
    nan[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"tensor 'n': x\[1, 3\] = nan"):
        tn.io.write_gguf(path, {"n": nan}, qtype={"n": "TQ2_0"})  # found while writing
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["keep.gguf"]


def test_another_formats_extension_is_refused(tmp_path):
    for name in ("w.npz", "w.SAFETENSORS"):
        with pytest.raises(tn.FormatError, match="writes GGUF files, not"):
            tn.io.write_gguf(tmp_path / name, {"w": np.ones(3, np.float32)})
        with pytest.raises(tn.FormatError, match="writes GGUF files, not"):
            tn.io.quantize_gguf(tmp_path / "missing.gguf", tmp_path / name)
    tn.io.write_gguf(tmp_path / "w.bin", {"w": np.ones(3, np.float32)})  # no format's: fine
    assert sorted(os.listdir(tmp_path)) == ["w.bin"]
