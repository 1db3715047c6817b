"""Hostile .npz files: ``tn.load`` and ``ItemMemory.load`` raise FormatError, nothing else.

Each file is crafted here (zipfile, np.lib.format, json); all are loaded in one child
process under an address-space limit (its size after start-up plus 1 GiB) and a timeout,
so that a regression fails a test instead of exhausting memory or hanging CI.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import tritnum as tn
from tritnum import vsa

resource = pytest.importorskip("resource")  # RLIMIT_AS: POSIX only
# one memory-limited child process reads every case (about 30 s): CI and --full run it
pytestmark = pytest.mark.slow

TIB = 2**40
META = "__tritnum__"


def npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asanyarray(array), allow_pickle=True)
    return buf.getvalue()


def npy_header(shape: tuple[int, ...], dtype: str = "|u1") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def write_zip(path: Path, members: dict[str, bytes | np.ndarray], *,
              compression: int = zipfile.ZIP_STORED,
              declared: dict[str, int] | None = None) -> None:
    """Members as ``name.npy``; ``declared`` overrides a member's sizes in the directory."""
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, value in members.items():
            zf.writestr(name + ".npy", value if isinstance(value, bytes) else npy(value))
        for name, size in (declared or {}).items():
            info = zf.getinfo(name + ".npy")
            info.file_size = size
            if compression == zipfile.ZIP_STORED:
                info.compress_size = size


def streamed_zeros(path: Path, head: dict[str, np.ndarray], name: str,
                   shape: tuple[int, ...], dtype: str, fill: int) -> None:
    """A deflated member of ``shape`` filled with byte ``fill``, written 1 MiB at a time."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for key, value in head.items():
            zf.writestr(key + ".npy", npy(value))
        with zf.open(name + ".npy", "w", force_zip64=True) as w:
            w.write(npy_header(shape, dtype))
            chunk = bytes([fill]) * 2**20
            for _ in range(int(np.prod(shape)) * np.dtype(dtype).itemsize // 2**20):
                w.write(chunk)


# --- tritnum files -------------------------------------------------------------------------

def tn_header(header: object) -> np.ndarray:
    return np.array(header if isinstance(header, str) else json.dumps(header))


def tn_valid() -> dict[str, np.ndarray]:
    return {META: tn_header({"version": 2, "single": False, "items": {
                "w": {"shape": [2, 4], "format": "2bit", "group_size": None},
                "m": {"shape": [3], "format": "2bit"},
                "b": {"dtype": "<f4", "shape": [3]}}}),
            "w/data": tn.pack(np.zeros((2, 4), np.int8), "2bit").data,
            "w/scales": np.float32(2.0),
            "m/data": tn.pack([1, 0, -1], "2bit").data,
            "b/array": np.arange(3, dtype="<f4")}


def tn_edit(edit: Callable[[dict], object]) -> dict[str, np.ndarray]:
    members = tn_valid()
    header = json.loads(str(members[META][()]))
    members[META] = tn_header(edit(header))
    return members


def drop(mapping: dict, *path: str) -> dict:
    target = mapping
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return mapping


def put(mapping: dict, value: object, *path: str) -> dict:
    target = mapping
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return mapping


def without(*names: str) -> dict[str, np.ndarray]:
    members = tn_valid()
    for name in names:
        del members[name]
    return members


NEST = 100_000
TN_FILES: dict[str, Callable[[Path], None]] = {
    **{f"missing {'/'.join(key)}": (lambda p, key=key: write_zip(
        p, tn_edit(lambda h: drop(h, *key))))
       for key in [("version",), ("single",), ("items",), ("items", "w", "shape"),
                   ("items", "w", "format"), ("items", "w", "group_size"),
                   ("items", "b", "shape")]},
    **{f"{'/'.join(key)} = {value!r}": (lambda p, key=key, value=value: write_zip(
        p, tn_edit(lambda h: put(h, value, *key))))
       for key, value in [(("version",), "1"), (("version",), True), (("single",), "yes"),
                          (("items",), []), (("items", "w"), 5), (("items", "w", "shape"), "24"),
                          (("items", "w", "shape"), [2, 4.0]), (("items", "w", "shape"), [-2, -4]),
                          (("items", "w", "shape"), [True, 4]), (("items", "w", "format"), 3),
                          (("items", "w", "format"), "9bit"), (("items", "w", "group_size"), "x"),
                          (("items", "w", "group_size"), 3), (("single",), True),
                          (("items", "b", "dtype"), "|O"), (("items", "b", "dtype"), "<c8"),
                          (("items", "b", "dtype"), "i4,O"), (("items", "b", "dtype"), 5),
                          (("items", "b", "dtype"), "<f8"), (("items", "b", "dtype"), ">f4"),
                          (("items", "b", "shape"), [4]), (("items", "b", "shape"), [3, 1]),
                          (("items", "b", "shape"), "3")]},
    "header a list": lambda p: write_zip(p, tn_edit(lambda h: [h])),
    "header not JSON": lambda p: write_zip(p, tn_edit(lambda h: "{'version': 1")),
    "header an int array": lambda p: write_zip(p, {**tn_valid(), META: np.arange(3)}),
    "header 1-d": lambda p: write_zip(p, {**tn_valid(), META: np.array(["{}", "{}"])}),
    "header deeply nested": lambda p: write_zip(p, tn_edit(
        lambda h: '{"version": 1, "single": false, "items": ' + "[" * NEST + "]" * NEST + "}")),
    "no header": lambda p: write_zip(p, without(META)),
    "no data": lambda p: write_zip(p, without("m/data")),
    "no scales": lambda p: write_zip(p, without("w/scales")),
    "an array the header does not name": lambda p: write_zip(
        p, {**tn_valid(), "v/scales": np.float32(2.0)}),
    "object data": lambda p: write_zip(p, {**tn_valid(), "m/data": np.array([{}], object)}),
    "object array": lambda p: write_zip(p, {**tn_valid(), "b/array": np.array([{}], object)}),
    "no array": lambda p: write_zip(p, without("b/array")),
    "an array stored as data": lambda p: write_zip(
        p, {**without("b/array"), "b/data": np.arange(3, dtype="<f4")}),
    "npy header says 1 TiB": lambda p: write_zip(
        p, {**tn_valid(), "m/data": npy_header((TIB,)) + b"\x55"}),
    "directory says 1 TiB, stored": lambda p: write_zip(
        p, {**tn_valid(), "m/data": npy_header((TIB,)) + b"\x55"},
        declared={"m/data": 128 + TIB}),
    "directory says 1 TiB, deflated": lambda p: write_zip(
        p, {**tn_valid(), "m/data": npy_header((TIB,)) + b"\x55"},
        compression=zipfile.ZIP_DEFLATED, declared={"m/data": 128 + TIB}),
    "directory says 8 GiB, deflated": lambda p: write_zip(
        p, {**tn_valid(), "m/data": npy_header((2**33,)) + b"\x55"},
        compression=zipfile.ZIP_DEFLATED, declared={"m/data": 128 + 2**33}),
    "zip bomb": lambda p: streamed_zeros(
        p, {META: tn_header({"version": 1, "single": True,
                             "items": {"": {"shape": [2**31], "format": "2bit"}}})},
        "/data", (2**29,), "|u1", 0x55),
}


# --- ItemMemory files ----------------------------------------------------------------------

MEM_META = {"version": 1, "d": 70, "seed": 0, "density": 2 / 3, "format": "dense",
            "symbols": ["a", 7]}


def mem_members(meta: object, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
    text = meta if isinstance(meta, str) else json.dumps(meta)
    return {"meta": np.frombuffer(text.encode(), np.uint8),
            "rows": np.zeros((2, 70), np.int8) if rows is None else rows}


MEM_FILES: dict[str, Callable[[Path], None]] = {
    **{f"missing {key}": (lambda p, key=key: write_zip(
        p, mem_members({k: v for k, v in MEM_META.items() if k != key})))
       for key in MEM_META},
    **{f"{key} = {value!r}": (lambda p, key=key, value=value: write_zip(
        p, mem_members({**MEM_META, key: value})))
       for key, value in [("version", "1"), ("version", 2), ("d", "seventy"), ("d", True), ("d", 0),
                          ("seed", None), ("seed", 1.5), ("density", "x"), ("density", 0),
                          ("format", 3), ("format", "2bit"), ("symbols", 5),
                          ("symbols", ["a", [7]]), ("symbols", ["a", True]),
                          ("symbols", ["a", None])]},
    "meta a list": lambda p: write_zip(p, mem_members([MEM_META])),
    "meta not JSON": lambda p: write_zip(p, mem_members("{'d': 70")),
    "meta not UTF-8": lambda p: write_zip(p, {**mem_members(MEM_META),
                                              "meta": np.frombuffer(b"\xff{}", np.uint8)}),
    "meta int16": lambda p: write_zip(p, {**mem_members(MEM_META), "meta": np.zeros(4, np.int16)}),
    "meta deeply nested": lambda p: write_zip(
        p, mem_members(json.dumps(MEM_META)[:-1] + ', "x": ' + "[" * NEST + "]" * NEST + "}")),
    "no meta": lambda p: write_zip(p, {"rows": np.zeros((2, 70), np.int8)}),
    "no rows": lambda p: write_zip(p, {"meta": mem_members(MEM_META)["meta"]}),
    "an extra array": lambda p: write_zip(p, {**mem_members(MEM_META), "extra": np.zeros(1)}),
    "object rows": lambda p: write_zip(p, mem_members(MEM_META, np.array([[{}]], object))),
    "npy header says 1 TiB": lambda p: write_zip(
        p, mem_members(MEM_META, npy_header((2**34, 64), "|i1") + b"\0")),
    "directory says 1 TiB, stored": lambda p: write_zip(
        p, mem_members(MEM_META, npy_header((2**34, 64), "|i1") + b"\0"),
        declared={"rows": 128 + TIB}),
    "directory says 1 TiB, deflated": lambda p: write_zip(
        p, mem_members(MEM_META, npy_header((2**34, 64), "|i1") + b"\0"),
        compression=zipfile.ZIP_DEFLATED, declared={"rows": 128 + TIB}),
    "zip bomb": lambda p: streamed_zeros(
        p, {"meta": mem_members({**MEM_META, "d": 2**20, "symbols": list(range(512))})["meta"]},
        "rows",
        (512, 2**20), "|i1", 0),
}

CONTROLS = {"tn": lambda p: write_zip(p, tn_valid()),
            "mem": lambda p: write_zip(p, mem_members(MEM_META))}
CASES = {**{f"load: {name}": ("tn", build) for name, build in TN_FILES.items()},
         **{f"ItemMemory.load: {name}": ("mem", build) for name, build in MEM_FILES.items()}}


def big_tn(path: Path) -> None:  # 2 MiB of zero trits, valid
    tn.save(path, tn.pack(np.zeros(2**23, np.int8), "2bit"))


def big_mem(path: Path) -> None:
    mem = vsa.ItemMemory(2**21)
    mem.add("a")
    mem.save(path)


# (builder, max_bytes, loads): a valid 2 MiB file under a lower and a raised limit, and
# the files the cases above are made from, as they are (they load)
LIMITS = {**{f"{kind}, max_bytes={limit}": (kind, build, limit, limit > 2**21)
             for kind, build in (("tn", big_tn), ("mem", big_mem)) for limit in (2**20, 2**22)},
          **{f"{kind}, unedited": (kind, build, None, True) for kind, build in CONTROLS.items()}}


def flips(path: Path) -> list[tuple[int, int]]:
    """(byte, bit) of every bit of the file: zip headers, .npy headers, JSON and data."""
    return [(i, bit) for i in range(path.stat().st_size) for bit in range(8)]


CHILD = r"""
import json, sys, traceback
import numpy as np, tritnum as tn
from tritnum import vsa

spec = json.load(open(sys.argv[1]))

def load(kind, path, max_bytes=None):
    kw = {} if max_bytes is None else {"max_bytes": max_bytes}
    return tn.load(path, **kw) if kind == "tn" else vsa.ItemMemory.load(path, **kw)

def outcome(kind, path, max_bytes=None):
    try:
        load(kind, path, max_bytes)
        return "loaded"
    except tn.FormatError as exc:
        return "FormatError: " + str(exc)
    except BaseException as exc:
        return "".join(traceback.format_exception_only(type(exc), exc)).strip()

def same(kind, a, b):
    if kind == "tn":
        return a.keys() == b.keys() and all(
            np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype
            if isinstance(a[k], np.ndarray) else
            getattr(a[k], "packed", a[k]) == getattr(b[k], "packed", b[k])
            and np.array_equal(getattr(a[k], "scales", 0), getattr(b[k], "scales", 0))
            for k in a)
    return a.symbols == b.symbols and a.vectors == b.vectors

for kind, path in spec["valid"].items():  # warm up (kernels, imports) before the limit
    load(kind, path)
limit_memory()

result = {"cases": {name: outcome(kind, path) for name, (kind, path) in spec["cases"].items()},
          "limits": {name: outcome(kind, path, limit)
                     for name, (kind, path, limit) in spec["limits"].items()},
          "flips": {}}
for kind, path in spec["valid"].items():
    good, data = load(kind, path), bytearray(open(path, "rb").read())
    bad = []
    for i, bit in spec["flips"][kind]:
        data[i] ^= 1 << bit
        with open(spec["scratch"], "wb") as f:
            f.write(data)
        data[i] ^= 1 << bit
        try:
            if not same(kind, good, load(kind, spec["scratch"])):
                bad.append([i, bit, "loaded something else"])
        except tn.FormatError:
            pass
        except BaseException as exc:
            bad.append([i, bit, f"{type(exc).__name__}: {exc}"])
    result["flips"][kind] = bad
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, memory_limited_child) -> dict:
    """Build every file, load them all in one memory-limited child, return what each did."""
    root = tmp_path_factory.mktemp("hostile")
    spec: dict = {"cases": {}, "limits": {}, "valid": {}, "flips": {},
                  "scratch": str(root / "flipped.npz")}
    for i, (name, (kind, build)) in enumerate(CASES.items()):
        build(root / f"case{i}.npz")
        spec["cases"][name] = (kind, str(root / f"case{i}.npz"))
    for i, (name, (kind, build, limit, _)) in enumerate(LIMITS.items()):
        build(root / f"limit{i}.npz")
        spec["limits"][name] = (kind, str(root / f"limit{i}.npz"), limit)
    tn.save(root / "valid_tn.npz", {"w": tn.quantize(np.arange(-4.0, 4.0).reshape(2, 4)),
                                    "m": tn.pack([1, 0, -1], "bitplane"),
                                    "b": np.arange(3, dtype=np.float32)})
    mem = vsa.ItemMemory(70, format="bitplane")
    mem.add("a"), mem.add(7)
    mem.save(root / "valid_mem.npz")
    for kind in ("tn", "mem"):
        spec["valid"][kind] = str(root / f"valid_{kind}.npz")
        spec["flips"][kind] = flips(root / f"valid_{kind}.npz")
    return memory_limited_child(CHILD, spec, root)


@pytest.mark.parametrize("name", CASES)
def test_hostile_file_raises_format_error(name, outcomes):
    assert outcomes["cases"][name].startswith("FormatError: "), outcomes["cases"][name]


@pytest.mark.parametrize("name", [n for n in CASES if "missing" in n or " = " in n])
def test_the_error_names_the_key(name, outcomes):
    key = name.split(": ", 1)[1].removeprefix("missing ").split(" = ")[0].split("/")[-1]
    assert key in outcomes["cases"][name]


@pytest.mark.parametrize("name", [n for n in CASES if "TiB" in n or "GiB" in n or "bomb" in n])
def test_oversized_members_are_named(name, outcomes):
    message = outcomes["cases"][name]
    assert "'m/data" in message or "'rows" in message or "'/data" in message, message


@pytest.mark.parametrize("name", LIMITS)
def test_max_bytes_is_a_limit_the_caller_can_raise(name, outcomes):
    loads = LIMITS[name][3]
    message = outcomes["limits"][name]
    if loads:
        assert message == "loaded"
    else:
        assert message.startswith("FormatError: ") and "max_bytes=1048576" in message


@pytest.mark.parametrize("kind", ["tn", "mem"])
def test_flipped_bits_raise_format_error_or_load_the_same(kind, outcomes):
    assert outcomes["flips"][kind] == []


def test_max_bytes_type_errors(tmp_path):
    tn.save(tmp_path / "t.npz", tn.pack([1, 0, -1]))
    with pytest.raises(TypeError, match="max_bytes"):
        tn.load(tmp_path / "t.npz", max_bytes=1.5)
    with pytest.raises(ValueError, match="max_bytes"):
        vsa.ItemMemory.load(tmp_path / "t.npz", max_bytes=-1)
