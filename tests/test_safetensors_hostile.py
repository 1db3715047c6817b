"""Hostile safetensors files: ``read_safetensors`` raises FormatError naming the field, only.

Each file is a valid one (written by tritnum: ternary, bitplane, float and bool tensors)
with one thing edited: its header length, its JSON, a tensor's entry, tritnum's metadata
or a byte of its data. All are read in one child process under an address-space limit
(its size after start-up plus 1 GiB) and a timeout, as tests/test_npz_hostile.py does,
together with every single-bit flip of the valid file.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import tritnum as tn

pytest.importorskip("safetensors")
resource = pytest.importorskip("resource")  # RLIMIT_AS: POSIX only

NEST = 100_000
BIG = 2**40


def valid_file(path: Path) -> None:
    w = tn.quantize(np.random.default_rng(0).standard_normal((2, 8)), group_size=4)
    tn.io.write_safetensors(path, {"w": w, "m": tn.pack([[1, 0, -1]], "bitplane"),
                                   "p": tn.pack([1, 0, -1], "2bit"),
                                   "b": np.arange(3, dtype=np.float32),
                                   "f": np.array([True, False])}, {"format": "pt"})


def parts(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def assemble(header: dict | bytes, data: bytes, length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def edit(change: Callable[[dict, bytearray], object]) -> Callable[[Path, Path], bytes]:
    """A case: the valid file with ``change(header, data)`` applied (returning a new header,
    or None to keep the edited one)."""
    def build(valid: Path, _: Path) -> bytes:
        header, data = parts(valid)
        data = bytearray(data)
        out = change(header, data)
        return assemble(header if out is None else out, bytes(data))
    return build


def raw_header(text: bytes) -> Callable[[Path, Path], bytes]:
    return lambda valid, _: assemble(text, parts(valid)[1])


def put(*path_and_value: object) -> Callable[[Path, Path], bytes]:
    *path, value = path_and_value

    def change(header: dict, data: bytearray) -> None:
        target = header
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit(change)


def drop(*path: str) -> Callable[[Path, Path], bytes]:
    def change(header: dict, data: bytearray) -> None:
        target = header
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return edit(change)


def entry(key: str, change: Callable[[dict], object]) -> Callable[[Path, Path], bytes]:
    """Edit the JSON of tritnum's metadata entry ``key``."""
    def apply(header: dict, data: bytearray) -> None:
        value = json.loads(header["__metadata__"][key])
        out = change(value)
        header["__metadata__"][key] = json.dumps(value if out is None else out)
    return edit(apply)


def rename(old: str, new: str) -> Callable[[Path, Path], bytes]:
    return edit(lambda h, d: {new if k == old else k: v for k, v in h.items()})


def poke(tensor: str, at: int, value: int) -> Callable[[Path, Path], bytes]:
    """Set byte ``at`` of ``tensor``'s data."""
    def change(header: dict, data: bytearray) -> None:
        data[header[tensor]["data_offsets"][0] + at] = value
    return edit(change)


def zip_file(valid: Path, scratch: Path) -> bytes:
    tn.save(scratch.with_suffix(".npz"), {"b": np.ones(2)})
    return scratch.with_suffix(".npz").read_bytes()


# name -> (builder, what the message must name)
CASES: dict[str, tuple[Callable[[Path, Path], bytes], str]] = {
    "an empty file": (lambda v, s: b"", "fewer than the 8"),
    "7 bytes": (lambda v, s: b"\x10" + bytes(6), "fewer than the 8"),
    "an npz file": (zip_file, "zip archive"),
    "header length one past the end": (lambda v, s: assemble(
        *parts(v), length=len(assemble(*parts(v))) - 7), "header length"),
    "header length 2**63": (lambda v, s: assemble(*parts(v), length=2**63), "header length"),
    "header length 2**64 - 1": (lambda v, s: assemble(*parts(v), length=2**64 - 1),
                                "header length"),
    "header not UTF-8": (raw_header(b'{"\xff": 1}'), "UTF-8"),
    "header not JSON": (raw_header(b"{'b': 1}"), "not valid JSON"),
    "header a list": (raw_header(b"[]"), "not an object"),
    "header nests deeply": (raw_header(b'{"a": ' + b"[" * NEST + b"]" * NEST + b"}"),
                            "nests too deeply"),
    "a tensor twice": (lambda v, s: assemble(
        b'{"b": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
        b'"b": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x01"), "'b'"),
    "a tensor's entry an int": (put("b", 5), "'b'"),
    **{f"missing b/{key}": (drop("b", key), key) for key in ("dtype", "shape", "data_offsets")},
    **{f"b/{key} = {value!r}": (put("b", key, value), key) for key, value in [
        ("dtype", "F8_E4M3"), ("dtype", "C64"), ("dtype", "f32"), ("dtype", 5),
        ("shape", "3"), ("shape", [-3]), ("shape", [True, 3]), ("shape", [3.0]),
        ("shape", [3, None]), ("data_offsets", [16]), ("data_offsets", [28, 16]),
        ("data_offsets", [16, 28, 40]), ("data_offsets", "16:28"), ("data_offsets", [-1, 28]),
        ("data_offsets", [16, 2**64]), ("data_offsets", [16.0, 28.0])]},
    "b declares 2**80 bytes": (put("b", "shape", [BIG, BIG]), "shape"),
    "b declares 4 values in 3": (put("b", "shape", [4]), "shape"),
    "b overlaps m": (put("b", "data_offsets", [0, 12]), "overlap"),
    "a hole at the end": (edit(lambda h, d: d.extend(b"\0\0")), "unused"),
    "__metadata__ a list": (put("__metadata__", ["format"]), "__metadata__"),
    "__metadata__ value an int": (put("__metadata__", "format", 1), "__metadata__"),
    "a BOOL byte of 2": (poke("f", 1, 2), "BOOL"),
    # tritnum's layer
    "no tritnum.format_version": (drop("__metadata__", "tritnum.format_version"),
                                  "tritnum.format_version"),
    **{f"tritnum.format_version = {v!r}": (put("__metadata__", "tritnum.format_version", v),
                                           "version")
       for v in ("2", "x", "", "0", "1.0", "٣", "9" * 5000)},
    "w.tritnum not JSON": (put("__metadata__", "w.tritnum", "{shape: 1}"), "'w.tritnum'"),
    "w.tritnum a list": (put("__metadata__", "w.tritnum", "[]"), "'w.tritnum'"),
    "w.tritnum nests deeply": (put("__metadata__", "w.tritnum",
                                   '{"a": ' + "[" * NEST + "]" * NEST + "}"), "'w.tritnum'"),
    **{f"missing w.tritnum/{key}": (entry("w.tritnum", lambda e, k=key: {
        x: v for x, v in e.items() if x != k}), key) for key in ("shape", "format", "group_size")},
    **{f"w.tritnum/{key} = {value!r}": (entry("w.tritnum", lambda e, k=key, v=value: {**e, k: v}),
                                        want)
       for key, value, want in [
           ("shape", "2x8", "shape"), ("shape", [2, 8.0], "shape"), ("shape", [2, -8], "shape"),
           ("shape", [], "rank"), ("shape", [2, 9], "'w'"), ("shape", [4, 8], "'w'"),
           ("format", "9bit", "format"), ("format", 2, "format"), ("format", "bitplane", "'w'"),
           ("group_size", "4", "group_size"), ("group_size", 3, "group_size"),
           ("group_size", 0, "group_size"), ("group_size", True, "group_size"),
           ("group_size", None, "scales")]},
    "m.tritnum with a group_size": (entry("m.tritnum", lambda e: {**e, "group_size": 3}),
                                    "'m.tritnum.scales' is missing"),
    "w's packed tensor renamed": (rename("w.tritnum.packed", "x"), "'w.tritnum.packed'"),
    "w's scales renamed": (rename("w.tritnum.scales", "x"), "'w.tritnum.scales'"),
    "an orphan packed tensor": (drop("__metadata__", "w.tritnum"), "'w.tritnum'"),
    "a plain tensor named w": (rename("b", "w"), "'w'"),
    "w's packed data I8": (put("w.tritnum.packed", "dtype", "I8"), "uint8"),
    "w's packed data one row": (put("w.tritnum.packed", "shape", [4]), "'w'"),
    "m's packed data U8": (edit(lambda h, d: h["m.tritnum.packed"].update(
        dtype="U8", shape=[1, 2, 8])), "uint64"),
    "w's scales I32": (put("w.tritnum.scales", "dtype", "I32"), "float32"),
    "w's scales BF16": (edit(lambda h, d: h["w.tritnum.scales"].update(
        dtype="BF16", shape=[2, 4])), "float32"),
    "w's scales flat": (put("w.tritnum.scales", "shape", [4]), "scales"),
    "a 2bit code 3": (poke("w.tritnum.packed", 0, 0xFF), "corrupt '2bit'"),
    # p is [1, 0, -1] and padding: codes 2, 1, 0 and 1 (0b01_00_01_10); the padding made 0
    "2bit padding": (poke("p.tritnum.packed", 0, 0b00_00_01_10), "corrupt '2bit'"),
    "bitplane plus and minus": (poke("m.tritnum.packed", 8, 1), "corrupt 'bitplane'"),
    "bitplane padding": (poke("m.tritnum.packed", 1, 1), "corrupt 'bitplane'"),
}

CHILD = r"""
import json, sys, traceback
import numpy as np, tritnum as tn

spec = json.load(open(sys.argv[1]))

def outcome(path, **kw):
    try:
        tn.io.read_safetensors(path, **kw)
        return "loaded"
    except tn.FormatError as exc:
        return "FormatError: " + str(exc)
    except BaseException as exc:
        return "".join(traceback.format_exception_only(type(exc), exc)).strip()

tn.io.read_safetensors(spec["valid"])  # warm up (kernels, imports) before the limit
limit_memory()

result = {"cases": {name: outcome(path) for name, path in spec["cases"].items()},
          "valid": outcome(spec["valid"]),
          "limit": outcome(spec["valid"], max_bytes=spec["limit"]),
          "flips": []}
data = bytearray(open(spec["valid"], "rb").read())
for i in range(len(data)):
    for bit in range(8):
        data[i] ^= 1 << bit
        with open(spec["scratch"], "wb") as f:
            f.write(data)
        data[i] ^= 1 << bit
        found = outcome(spec["scratch"])
        if found != "loaded" and not found.startswith("FormatError: "):
            result["flips"].append([i, bit, found])
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, memory_limited_child) -> dict:
    """Build every file, read them all in one memory-limited child, return what each did."""
    root = tmp_path_factory.mktemp("hostile_st")
    valid = root / "valid.safetensors"
    valid_file(valid)
    spec: dict = {"cases": {}, "valid": str(valid), "scratch": str(root / "flipped.safetensors"),
                  "limit": len(parts(valid)[1]) - 1}  # one byte less than the tensors hold
    for i, (name, (build, _)) in enumerate(CASES.items()):
        path = root / f"case{i}.safetensors"
        path.write_bytes(build(valid, root / f"scratch{i}"))
        spec["cases"][name] = str(path)
    return memory_limited_child(CHILD, spec, root)


def test_the_valid_file_loads(outcomes):
    assert outcomes["valid"] == "loaded"


@pytest.mark.parametrize("name", CASES)
def test_hostile_file_raises_format_error_naming_the_field(name, outcomes):
    message = outcomes["cases"][name]
    assert message.startswith("FormatError: ") and "is not a readable safetensors file" in message
    assert CASES[name][1] in message, message


def test_max_bytes_refuses_before_reading(outcomes):
    message = outcomes["limit"]
    assert message.startswith("FormatError") and "more than max_bytes=" in message


def test_flipped_bits_raise_format_error_or_load(outcomes):
    assert outcomes["flips"] == []


def test_max_bytes_type_errors(tmp_path):
    valid_file(tmp_path / "v.safetensors")
    with pytest.raises(TypeError, match="max_bytes"):
        tn.io.read_safetensors(tmp_path / "v.safetensors", max_bytes=1.5)
    with pytest.raises(ValueError, match="max_bytes"):
        tn.load(tmp_path / "v.safetensors", max_bytes=-1)


def test_a_missing_file_raises_its_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):  # not a FormatError: `except OSError` sees it
        tn.io.read_safetensors(tmp_path / "missing.safetensors")
    with pytest.raises(IsADirectoryError):
        tn.io.read_safetensors(tmp_path)
