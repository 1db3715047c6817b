"""safetensors files: tritnum's against the ``safetensors`` package's own reader and writer.

Every check reads the file back with a reader that is not the one that wrote it:
``safetensors.numpy`` / ``safetensors.torch`` for files tritnum writes, tritnum for
files the package writes; bytes are compared exactly (``.view`` of the raw bits).
"""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tritnum as tn
from tritnum.testing import packed_trits, ternary_tensors

safetensors = pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

PLAIN = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "float16", "float32", "float64"]


def bits(a):
    """The bytes of ``a`` as unsigned integers: compares NaN payloads and signed zeros."""
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def assert_same_array(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(bits(got), bits(want))


def assert_same_ternary(got, want):
    assert type(got) is type(want) and got.shape == want.shape and got.format == want.format
    assert_same_array(got.packed.data if hasattr(got, "packed") else got.data,
                      want.packed.data if hasattr(want, "packed") else want.data)
    if isinstance(want, tn.TernaryTensor):
        assert got.group_size == want.group_size
        assert_same_array(got.scales, want.scales)


def ternary(shape=(3, 20), fmt="2bit", seed=0, **mode):
    w = np.random.default_rng(seed).standard_normal(shape)
    return tn.quantize(w, format=fmt, **mode)


def plain(dtype, shape=(3, 5), seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        a = (rng.standard_normal(shape) * 1e3).astype(dtype)
        a.flat[:3] = [np.nan, -0.0, np.inf][: a.size]
        return a
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def mixed():
    return {"w": ternary(group_size=5), "row": ternary(fmt="base3", axis=-1),
            "whole": ternary((7,), fmt="bitplane"), "mask": tn.pack([[1, 0, -1]], "bitplane"),
            **{f"p.{d}": plain(d) for d in PLAIN},
            "scalar": np.float32(2.5), "empty": np.zeros((0, 4), np.float16)}


# --- tritnum writes, safetensors reads ------------------------------------------------------

def test_a_plain_reader_sees_the_naming_scheme(tmp_path):
    path = tmp_path / "m.safetensors"
    tensors = mixed()
    tn.io.write_safetensors(path, tensors, metadata={"format": "pt"})
    seen = load_file(path)
    expected = {"w.tritnum.packed", "w.tritnum.scales", "row.tritnum.packed",
                "row.tritnum.scales", "whole.tritnum.packed", "whole.tritnum.scales",
                "mask.tritnum.packed", *(k for k in tensors if k.startswith("p.")),
                "scalar", "empty"}
    assert set(seen) == expected
    for name in ("w", "row", "whole"):
        t = tensors[name]
        assert_same_array(seen[f"{name}.tritnum.packed"], t.packed.data)
        assert_same_array(seen[f"{name}.tritnum.scales"], t.scales)
    assert seen["w.tritnum.packed"].dtype == np.uint8 and seen["w.tritnum.packed"].shape == (3, 5)
    assert seen["row.tritnum.packed"].shape == (3, 4)  # base3: 5 trits a byte
    assert seen["whole.tritnum.packed"].dtype == np.uint64
    assert seen["whole.tritnum.packed"].shape == (2, 1)  # bitplane: plus, minus
    assert seen["w.tritnum.scales"].shape == (3, 4) and seen["whole.tritnum.scales"].shape == ()
    assert_same_array(seen["mask.tritnum.packed"], tensors["mask"].data)
    for name, a in tensors.items():
        if name.startswith("p.") or name in ("scalar", "empty"):
            assert_same_array(seen[name], np.asarray(a))
    with safe_open(path, framework="np") as f:
        meta = f.metadata()
    assert meta["format"] == "pt" and meta["tritnum.format_version"] == "1"
    assert json.loads(meta["w.tritnum"]) == {"shape": [3, 20], "format": "2bit", "group_size": 5}
    assert json.loads(meta["row.tritnum"])["group_size"] == 20
    assert json.loads(meta["whole.tritnum"]) == {"shape": [7], "format": "bitplane",
                                                 "group_size": None}
    assert json.loads(meta["mask.tritnum"]) == {"shape": [1, 3], "format": "bitplane"}
    assert set(meta) == {"format", "tritnum.format_version", "w.tritnum", "row.tritnum",
                         "whole.tritnum", "mask.tritnum"}


def test_plain_tensors_only_write_no_tritnum_metadata(tmp_path):
    """transformers refuses a header whose metadata lacks "format": none is written."""
    path = tmp_path / "plain.safetensors"
    tn.io.write_safetensors(path, {"b": np.ones(3, np.float32)})
    with safe_open(path, framework="np") as f:
        assert f.metadata() is None
    assert_same_array(load_file(path)["b"], np.ones(3, np.float32))


def test_round_trip_is_exact(tmp_path):
    path = tmp_path / "m.safetensors"
    tensors = mixed()
    tn.io.write_safetensors(path, tensors, metadata={"format": "pt", "note": "é"})
    back = tn.io.read_safetensors(path)
    assert isinstance(back, tn.io.SafetensorsFile)
    assert set(back) == set(tensors) and back.metadata == {"format": "pt", "note": "é"}
    for name, want in tensors.items():
        if isinstance(want, (tn.TernaryTensor, tn.PackedTrits)):
            assert_same_ternary(back[name], want)
        else:
            assert_same_array(back[name], np.asarray(want))
            assert not back[name].flags.writeable  # a view of the mapped file
    assert back.dtypes["p.float16"] == "F16" and back.dtypes["p.bool"] == "BOOL"
    assert "w" not in back.dtypes


def test_layouts_are_read_in_place(tmp_path):
    """Big-endian and strided inputs are written little-endian and whole."""
    path = tmp_path / "m.safetensors"
    a = np.arange(24, dtype=">f4").reshape(4, 6)[:, ::2]
    t = ternary((4, 9), group_size=3)
    t_strided = t[::2]
    tn.io.write_safetensors(path, {"a": a, "t": t_strided})
    back = tn.io.read_safetensors(path)
    assert_same_array(back["a"], a.astype("<f4"))
    assert_same_ternary(back["t"], t_strided)


@given(t=st.one_of(ternary_tensors(), packed_trits()))
def test_any_ternary_tensor_round_trips(t, tmp_path_factory):
    path = tmp_path_factory.mktemp("st") / "t.safetensors"
    tn.io.write_safetensors(path, {"t": t})
    assert_same_ternary(tn.io.read_safetensors(path)["t"], t)
    packed = t.packed if isinstance(t, tn.TernaryTensor) else t
    assert_same_array(load_file(path)["t.tritnum.packed"], packed.data)


# --- safetensors writes, tritnum reads ------------------------------------------------------

def test_files_of_safetensors_numpy_are_read(tmp_path):
    path = tmp_path / "np.safetensors"
    arrays = {f"x.{d}": plain(d, seed=i) for i, d in enumerate(PLAIN)}
    arrays["zero_d"] = np.array(3, np.int16)
    save_file(arrays, path, metadata={"k": "v"})
    back = tn.io.read_safetensors(path)
    assert back.metadata == {"k": "v"} and set(back) == set(arrays)
    for name, a in arrays.items():
        assert_same_array(back[name], a)


def test_files_of_safetensors_torch_are_read_bfloat16_as_float32(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file as torch_save

    path = tmp_path / "pt.safetensors"
    tensors = {"emb": torch.randn(6, 4).bfloat16(), "norm": torch.randn(4).half(),
               "ids": torch.arange(5), "mask": torch.tensor([True, False])}
    tensors["emb"][0, :3] = torch.tensor([float("nan"), -0.0, float("-inf")])
    torch_save(tensors, path, metadata={"format": "pt"})
    back = tn.io.read_safetensors(path)
    assert back.dtypes == {"emb": "BF16", "norm": "F16", "ids": "I64", "mask": "BOOL"}
    assert_same_array(back["emb"], tensors["emb"].float().numpy())  # exact widening
    assert back["emb"].dtype == np.float32
    for name in ("norm", "ids", "mask"):
        assert_same_array(back[name], tensors[name].numpy())


def test_torch_tensors_are_written_with_their_bits(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file as torch_load

    path = tmp_path / "pt.safetensors"
    emb = torch.randn(4, 6).bfloat16()
    tensors = {"emb": emb, "emb_t": emb.T, "grad": torch.ones(3, requires_grad=True),
               "half": torch.randn(5).half()}
    tn.io.write_safetensors(path, tensors)
    seen = torch_load(path)
    assert seen["emb"].dtype == torch.bfloat16
    assert torch.equal(seen["emb"].view(torch.int16), emb.view(torch.int16))
    assert torch.equal(seen["emb_t"].view(torch.int16), emb.T.contiguous().view(torch.int16))
    assert torch.equal(seen["grad"], torch.ones(3)) and seen["half"].dtype == torch.float16


def test_a_model_file_rewritten_with_its_dtypes_is_byte_identical(tmp_path):
    """Read a bfloat16 checkpoint, write it back: NumPy-land float32, the file's bytes kept."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file as torch_save

    src, dst = tmp_path / "src.safetensors", tmp_path / "dst.safetensors"
    torch_save({"emb": torch.randn(8, 4).bfloat16(), "norm": torch.randn(4).half(),
                "ids": torch.arange(3, dtype=torch.int32)}, src, metadata={"format": "pt"})
    f = tn.io.read_safetensors(src)
    tn.io.write_safetensors(dst, f, f.metadata, dtypes=f.dtypes)
    assert dst.read_bytes() == src.read_bytes()
    tn.io.write_safetensors(dst, f, f.metadata)  # without dtypes: float32 holds them exactly
    with safe_open(dst, framework="np") as g:
        assert g.get_slice("emb").get_dtype() == "F32"


def test_dtypes_store_floats_only_where_exact(tmp_path):
    path = tmp_path / "d.safetensors"
    x = np.array([1.5, -0.0, np.inf, np.nan, 2.0**-133], np.float64)  # bfloat16 values
    y = np.array([1.5, -0.0, np.inf, np.nan, 2.0**-24], np.float32)  # float16 values
    tn.io.write_safetensors(path, {"x": x, "y": y}, dtypes={"x": "BF16", "y": "F16",
                                                            "not_there": "F16"})
    with safe_open(path, framework="np") as f:
        assert [f.get_slice(k).get_dtype() for k in "xy"] == ["BF16", "F16"]
    back = tn.io.read_safetensors(path)
    assert_same_array(back["x"], x.astype(np.float32))
    assert_same_array(back["y"], y.astype(np.float16))
    with pytest.raises(tn.FormatError, match=r"'x': 1 of its 3 values are not exact in BF16"):
        tn.io.write_safetensors(path, {"x": np.float32([1, 1 + 2**-10, 2])}, dtypes={"x": "BF16"})
    for lost in (1e6, 2.0**-25, 1 + 2**-11):  # overflow, underflow, rounding
        with pytest.raises(tn.FormatError, match="1 of its 1 values are not exact in F16"):
            tn.io.write_safetensors(path, {"x": np.float64([lost])}, dtypes={"x": "F16"})
    with pytest.raises(TypeError, match=r"tensor 'i' is I32: only a float"):
        tn.io.write_safetensors(path, {"i": np.int32([1])}, dtypes={"i": "F32"})
    with pytest.raises(ValueError, match=r"dtypes\['x'\] must be one of"):
        tn.io.write_safetensors(path, {"x": x}, dtypes={"x": "float16"})


def test_overwriting_the_file_that_was_read(tmp_path):
    """The tensors read from a file are views of its mapping; writing over it keeps them."""
    path = tmp_path / "m.safetensors"
    a = np.arange(10_000, dtype=np.float32)
    tn.io.write_safetensors(path, {"a": a, "w": ternary()})
    f = tn.io.read_safetensors(path)
    tn.io.write_safetensors(path, {**f, "b": np.zeros(3)}, dtypes=f.dtypes)
    assert_same_array(f["a"], a)
    back = tn.io.read_safetensors(path)
    assert set(back) == {"a", "w", "b"} and back["w"].packed == ternary().packed


# --- refusals when writing ------------------------------------------------------------------

@pytest.mark.parametrize("tensors, error, match", [
    ([np.ones(2)], TypeError, "mapping of names"),
    ({1: np.ones(2)}, TypeError, "names must be str"),
    ({"a": [1.0, 2.0]}, TypeError, "'a' is a list"),
    ({"a": np.array(["x"])}, TypeError, "'a' is an array of <U1"),
    ({"a": np.array([{}], object)}, TypeError, "'a' is an array of object"),
    ({"a": np.ones(2, np.complex64)}, TypeError, "complex64"),
    ({"a.tritnum.packed": np.ones(2)}, ValueError, "tritnum's own"),
    ({"a.tritnum.scales": np.ones(2)}, ValueError, "tritnum's own"),
    ({"__metadata__": np.ones(2)}, ValueError, "safetensors'"),
])
def test_write_refuses(tensors, error, match, tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(error, match=match):
        tn.io.write_safetensors(path, tensors)
    assert not path.exists()  # nothing written before every value is checked


@pytest.mark.parametrize("metadata, error, match", [
    ({"k": 1}, TypeError, "str to str"),
    ({1: "v"}, TypeError, "str to str"),
    ("format=pt", TypeError, "mapping of str to str"),
    ({"tritnum.format_version": "1"}, ValueError, "tritnum's own"),
    ({"w.tritnum": "{}"}, ValueError, "tritnum's own"),
])
def test_write_refuses_metadata(metadata, error, match, tmp_path):
    with pytest.raises(error, match=match):
        tn.io.write_safetensors(tmp_path / "x.safetensors", {"a": np.ones(2)}, metadata)


@pytest.mark.parametrize("name", ["w.npz", "w.NPZ", "w.gguf"])
def test_write_refuses_another_formats_extension(name, tmp_path):
    with pytest.raises(tn.FormatError, match="write_safetensors writes safetensors files, not"):
        tn.io.write_safetensors(tmp_path / name, {"a": np.ones(2)})
    tn.io.write_safetensors(tmp_path / "w.st", {"a": np.ones(2)})  # other names are written
    assert_same_array(load_file(tmp_path / "w.st")["a"], np.ones(2))


def test_write_errors_are_os_errors(tmp_path):
    with pytest.raises(OSError, match="cannot write"):
        tn.io.write_safetensors(tmp_path / "missing" / "x.safetensors", {"a": np.ones(2)})


# --- tn.save / tn.load: the extension picks the format --------------------------------------

@pytest.mark.parametrize("name", ["m.safetensors", "m.SafeTensors"])
def test_save_and_load_safetensors(name, tmp_path):
    path = tmp_path / name
    tensors = mixed()
    tn.save(path, tensors)
    assert "w.tritnum.packed" in load_file(path)  # safetensors bytes, not an npz
    back = tn.load(path)
    assert isinstance(back, tn.io.SafetensorsFile) and set(back) == set(tensors)
    assert_same_ternary(back["w"], tensors["w"])
    with pytest.raises(tn.FormatError, match="max_bytes=10"):
        tn.load(path, max_bytes=10)
    with pytest.raises(TypeError, match="pass a dict"):
        tn.save(path, tensors["w"])


@pytest.mark.parametrize("name", ["weights", "w.bin", "w.npy", "w.gguf", "w.pt",
                                  "w.safetensors.tmp", "w.npz.bak"])
def test_save_and_load_refuse_other_extensions(name, tmp_path):
    path = tmp_path / name
    with pytest.raises(tn.FormatError, match=r"must be one of '\.npz', '\.safetensors'"):
        tn.save(path, {"a": np.ones(2)})
    assert not path.exists()
    path.write_bytes(b"")
    with pytest.raises(tn.FormatError, match=r"tn\.load picks the format from the extension"):
        tn.load(path)


def test_a_file_under_the_other_formats_name_is_refused(tmp_path):
    npz, st_ = tmp_path / "a.npz", tmp_path / "a.safetensors"
    tn.save(npz, {"a": np.ones(2)})
    tn.save(st_, {"a": np.ones(2)})
    swapped_npz, swapped_st = tmp_path / "b.safetensors", tmp_path / "b.npz"
    swapped_npz.write_bytes(npz.read_bytes())
    swapped_st.write_bytes(st_.read_bytes())
    with pytest.raises(tn.FormatError, match="zip archive"):
        tn.load(swapped_npz)
    with pytest.raises(tn.FormatError, match="not a readable tritnum file"):
        tn.load(swapped_st)


def test_plain_tensors_are_views_of_the_mapping(tmp_path):
    path = tmp_path / "m.safetensors"
    tn.io.write_safetensors(path, {"a": np.arange(5.0)})
    a = tn.io.read_safetensors(path)["a"]
    assert not a.flags.owndata and not a.flags.writeable
    base = a
    while getattr(base, "base", None) is not None:
        base = base.base
    assert type(getattr(base, "obj", base)).__name__ == "mmap"  # through a memoryview
