"""Hostile GGUF files: every one raises FormatError naming the field, under a memory limit.

Each file is crafted by hand (little-endian GGUF v3). They are all read in one child
process whose address space is capped at 2 GiB above its start and whose every read
has a 10 s alarm, so a regression that loops past the end of a file or allocates
without bound fails here instead of hanging CI or exhausting memory.
"""

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

import tritnum as tn

F32, TQ2_0, I2_S = 0, 35, 36  # GGML tensor types
U8, U32, STRING, ARRAY = 0, 4, 8, 9  # GGUF value types
W = tn.quantize(np.random.default_rng(0).standard_normal((2, 256)))
NORM = np.arange(2, dtype=np.float32)


def gstr(s):
    return struct.pack("<Q", len(s)) + s


def kv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


def info(name, dims, kind, offset):
    return (gstr(name) + struct.pack(f"<I{len(dims)}Q", len(dims), *dims)
            + struct.pack("<IQ", kind, offset))


def gguf_file(kvs=(), infos=(), data=b"", n_kv=None, n_tensors=None):
    """A GGUF v3 file: header, key-values, tensor infos, padding to 32, data."""
    n_tensors = len(infos) if n_tensors is None else n_tensors
    n_kv = len(kvs) if n_kv is None else n_kv
    head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + b"".join(kvs) + b"".join(infos)
    return head + bytes(-len(head) % 32) + data


ARCH = kv(b"general.architecture", STRING, gstr(b"tritnum"))
W_BYTES = tn.io.to_gguf_blocks(W, "TQ2_0").tobytes()  # 2 blocks of 66 bytes


def valid(w_dims=(256, 2), w_kind=TQ2_0, w_offset=32, norm_dims=(2,), w_bytes=W_BYTES):
    """norm (F32) at offset 0, w (TQ2_0) at 32, ending at the end of the file."""
    data = NORM.tobytes() + bytes(24) + w_bytes
    return gguf_file([ARCH], [info(b"norm", norm_dims, F32, 0),
                              info(b"w", w_dims, w_kind, w_offset)], data)


def nested(depth):
    """A key whose value is an array of one array of ... of one uint8, ``depth`` deep."""
    payload = struct.pack("<IQ", U8, 1) + b"\x01"
    for _ in range(depth - 1):
        payload = struct.pack("<IQ", ARRAY, 1) + payload
    return kv(b"deep", ARRAY, payload)


def big_endian(count):
    """A byte-swapped file (as gguf reads them): one key, an array of ``count`` uint8."""
    return (b"GGUF" + struct.pack(">IQQQ", 3, 0, 1, 1) + b"a"
            + struct.pack(">IIQ", ARRAY, U8, count) + b"\1\2\3")


def corrupt_codes():
    codes = bytearray(W_BYTES)
    codes[:64] = b"\xff" * 64  # 2-bit code 3 in the first block's quants
    return bytes(codes)


HOSTILE = {
    "huge_array": (gguf_file([kv(b"a", ARRAY, struct.pack("<IQ", U8, 2**40))]).ljust(64, b"\0"),
                   r"key 'a': an array of 1099511627776 uint8"),
    "huge_array_big_endian": (big_endian(2**40), r"key 'a': an array of 1099511627776 uint8"),
    "huge_string_array": (gguf_file([kv(b"a", ARRAY, struct.pack("<IQ", STRING, 2**40))]),
                          r"key 'a': an array of 1099511627776 strings"),
    "huge_string": (gguf_file([kv(b"s", STRING, struct.pack("<Q", 2**62))]),
                    r"key 's': a string of 4611686018427387904 bytes"),
    "huge_key": (gguf_file([struct.pack("<Q", 2**63)], data=bytes(64)),
                 r"key #0: the name of \d+ bytes"),
    "huge_n_kv": (gguf_file(n_kv=2**64 - 1), r"kv_count 18446744073709551615"),
    "huge_n_tensors": (gguf_file(n_tensors=2**64 - 1), r"tensor_count 18446744073709551615"),
    "deep_nesting": (gguf_file([nested(5000)]), r"key 'deep'\[0\]+.*nested more than"),
    "unknown_value_type": (gguf_file([kv(b"x", 99, b"\0" * 8)]), r"key 'x': unknown value type 99"),
    "unknown_item_type": (gguf_file([kv(b"x", ARRAY, struct.pack("<IQ", 99, 0))]),
                          r"key 'x': unknown array item type 99"),
    "bad_alignment": (gguf_file([kv(b"general.alignment", U32, struct.pack("<I", 3))]),
                      r"key 'general.alignment': 3 is not a power of two"),
    "duplicate_key": (gguf_file([ARCH, ARCH]), r"key 'general.architecture': a duplicate"),
    "offset_wraps": (valid(w_offset=2**64 - 1),
                     r"tensor 'w': data at offset 18446744073709551615 .* runs past the end"),
    "offset_past_eof": (valid(w_offset=64), r"tensor 'w': data at offset 64 .* runs past the end"),
    "huge_n_dims": (gguf_file([], [struct.pack("<QsI", 1, b"w", 2**31)], bytes(64)),
                    r"tensor 'w': 2147483648 dimensions"),
    "dims_overflow": (valid(norm_dims=(2**32, 2**32)),
                      r"tensor 'norm': dimensions \[4294967296, 4294967296\] hold more values"),
    "dims_not_blocks": (valid(w_dims=(100, 2)), r"tensor 'w': TQ2_0 needs a first dimension"),
    "unknown_ggml_type": (valid(w_kind=1000), r"tensor 'w': unknown GGML type 1000"),
    "corrupt_codes": (valid(w_bytes=corrupt_codes()), r"tensor 'w' \(TQ2_0.*not a trit"),
    "corrupt_i2s": (valid(w_kind=I2_S, w_bytes=b"\xff" * 160), r"tensor 'w' \(I2_S.*not a trit"),
    "i2s_size": (valid(w_kind=I2_S, w_dims=(100, 2), w_bytes=b"\0" * 82),
                 r"tensor 'w' \(I2_S.*multiple of 128"),
    "duplicate_tensor": (gguf_file([], [info(b"n", (2,), F32, 0)] * 2, NORM.tobytes()),
                         r"tensor 'n': a duplicate tensor name"),
}
FULL = valid()
PREFIXES = {f"prefix_{n}": (FULL[:n], r"cannot read GGUF file") for n in range(len(FULL))}


def mutations(count=300, seed=0):
    """Copies of FULL with one to three random bytes of its header and padding replaced."""
    rng, header = np.random.default_rng(seed), len(FULL) - len(W_BYTES)
    out = {}
    for i in range(count):
        b = bytearray(FULL)
        for j in rng.integers(0, header, rng.integers(1, 4)):
            b[j] = rng.integers(0, 256)
        out[f"mutation_{i}"] = (bytes(b), "")
    return out


MUTATIONS = mutations()

CHILD = r"""
import json, resource, signal, sys
import tritnum as tn

cases = json.load(open(sys.argv[1]))
tn.io.read_gguf(cases["warm"])  # compile the kernels before the limit
with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm + 2 * 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))


def alarm(*_):
    raise TimeoutError("no answer within 10 s")


signal.signal(signal.SIGALRM, alarm)
for label, path in cases["paths"].items():
    signal.setitimer(signal.ITIMER_REAL, 10)
    try:
        tn.io.read_gguf(path)
        result = ["ok", ""]
    except BaseException as exc:  # report every kind, RecursionError and MemoryError too
        result = [type(exc).__name__, str(exc)[:500]]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    print(json.dumps([label, *result]), flush=True)
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Read every hostile file in one memory-limited child: label -> (error, message)."""
    folder = tmp_path_factory.mktemp("hostile")
    paths = {}
    for label, (content, _) in {**HOSTILE, **PREFIXES, **MUTATIONS, "valid": (FULL, "")}.items():
        paths[label] = str(folder / f"{label}.gguf")
        (folder / f"{label}.gguf").write_bytes(content)
    (folder / "cases.json").write_text(json.dumps({"warm": paths["valid"], "paths": paths}))
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(folder / "cases.json")],
                              capture_output=True, text=True, timeout=300,
                              cwd=Path(tn.__file__).parents[1])  # this tritnum
        stdout, stderr = done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        stdout, stderr = exc.stdout or "", f"timed out: {exc.stderr}"
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
    found = {}
    for line in stdout.splitlines():
        label, error, message = json.loads(line)
        found[label] = (error, message)
    found["_stderr"] = stderr
    return found


def _result(results, label):
    assert label in results, f"no result for {label}: {results['_stderr'][-2000:]}"
    return results[label]


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc are Linux's")
@pytest.mark.parametrize("label", list(HOSTILE))
def test_hostile_file_raises_format_error_naming_the_field(results, label):
    error, message = _result(results, label)
    assert error == "FormatError", f"{label}: {error}: {message}"
    assert message.startswith("cannot read GGUF file"), message
    assert re.search(HOSTILE[label][1], message), message


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc are Linux's")
def test_every_truncation_raises_format_error(results):
    wrong = {label: _result(results, label) for label in PREFIXES
             if _result(results, label)[0] != "FormatError"}
    assert not wrong, wrong
    assert _result(results, "valid") == ("ok", "")


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc are Linux's")
def test_random_header_bytes_read_or_raise_format_error(results):
    wrong = {label: _result(results, label) for label in MUTATIONS
             if _result(results, label)[0] not in ("ok", "FormatError")}
    assert not wrong, wrong


def test_crafted_valid_file_round_trips(tmp_path):
    path = tmp_path / "valid.gguf"
    path.write_bytes(FULL)
    back = tn.io.read_gguf(path)
    assert list(back) == ["norm", "w"]
    np.testing.assert_array_equal(back["norm"], NORM)
    np.testing.assert_array_equal(back["w"].packed.unpack(), W.packed.unpack())
    assert tn.io.to_gguf_blocks(back["w"], "TQ2_0").tobytes() == W_BYTES


def test_written_files_pass_the_header_check(tmp_path):
    from tritnum.io.gguf.header import check_header

    path = tmp_path / "w.gguf"
    tn.io.write_gguf(path, {"w": W, "norm": NORM, "n": np.ones((2, 3, 4, 5), np.int8)})
    start = check_header(path)
    assert start % 32 == 0 and start == gguf.GGUFReader(path).data_offset


def test_big_endian_file_passes_the_header_check(tmp_path):
    path = tmp_path / "be.gguf"
    path.write_bytes(big_endian(3))
    model = tn.io.read_gguf(path)
    assert model == {}
    assert model.metadata == {"a": tn.io.GGUFValue("array", [1, 2, 3], item_type="uint8")}
    assert gguf.GGUFReader(path).fields["a"].contents() == [1, 2, 3]


def nested(depth):
    """A GGUFValue of arrays nested ``depth`` deep (the innermost holds two int32)."""
    value = tn.io.GGUFValue("array", [1, 2], item_type="int32")
    for _ in range(depth - 1):
        value = tn.io.GGUFValue("array", [value], item_type="array")
    return value


Q8 = np.zeros(68, np.uint8)  # two Q8_0 blocks: (2, 32)
HOSTILE_WRITES = {  # what the reader refuses: write_gguf must refuse it too
    "nested 9 deep": ({"norm": NORM}, {"deep": nested(9)}, r"'deep'.*nested more than 8 deep"),
    "blocks short": ({"q": tn.io.GGUFBlocks(Q8[:34], "Q8_0", (2, 32))}, {},
                     r"'q': 34 bytes of data, where .* hold 68"),
    "blocks long": ({"q": tn.io.GGUFBlocks(np.zeros(102, np.uint8), "Q8_0", (2, 32))}, {},
                    r"'q': 102 bytes of data, where .* hold 68"),
    "row not whole blocks": ({"q": tn.io.GGUFBlocks(Q8[:34], "Q8_0", (2, 16))}, {},
                             r"'q': Q8_0 needs a first dimension that is a multiple of 32"),
    "tensor names, same bytes": ({"\u00e9": NORM, "\udcc3\udca9": NORM}, {},
                                 r"'\u00e9': a duplicate tensor name"),
    "keys, same bytes": ({"norm": NORM}, {"\u00e9": 1, "\udcc3\udca9": 2},
                         r"'\u00e9': a duplicate key name"),
}


@pytest.mark.parametrize("label", list(HOSTILE_WRITES))
def test_writer_refuses_what_the_reader_refuses(tmp_path, label):
    """write_gguf applies the reader's checks: FormatError before any file is created, and an
    earlier file at the path is left as it was."""
    tensors, metadata, message = HOSTILE_WRITES[label]
    with pytest.raises(tn.FormatError, match=message):
        tn.io.write_gguf(tmp_path / "x.gguf", tensors, metadata=metadata)
    assert list(tmp_path.iterdir()) == []
    tn.io.write_gguf(tmp_path / "x.gguf", {"norm": NORM})
    before = (tmp_path / "x.gguf").read_bytes()
    with pytest.raises(tn.FormatError, match=message):
        tn.io.write_gguf(tmp_path / "x.gguf", tensors, metadata=metadata)
    assert [p.name for p in tmp_path.iterdir()] == ["x.gguf"]
    assert (tmp_path / "x.gguf").read_bytes() == before


def test_writer_takes_what_the_reader_takes_at_the_bounds(tmp_path):
    """The near misses of the refused writes round trip: arrays nested 8 deep, blocks whose
    byte count matches their type and shape."""
    path = tmp_path / "x.gguf"
    q = tn.io.GGUFBlocks(Q8, "Q8_0", (2, 32))
    tn.io.write_gguf(path, {"q": q, "\u00e9": NORM}, metadata={"deep": nested(8)})
    back = tn.io.read_gguf(path)
    assert back.metadata["deep"] == nested(8)
    np.testing.assert_array_equal(back["q"].data, Q8)
    reader = gguf.GGUFReader(path)
    assert [t.name for t in reader.tensors] == ["q", "\u00e9"]


ALIGN_CHILD = r"""
import resource, sys
import numpy as np
import tritnum as tn

path = sys.argv[1]
w = np.arange(6, dtype=np.float32).reshape(2, 3)
tn.io.write_gguf(path + ".warm", {"w": w})  # imports and kernels before the limit
with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))
tn.io.write_gguf(path, {"w": w, "v": np.ones(5, np.float32)},
                 metadata={"general.alignment": tn.io.GGUFValue("uint32", 2**31)})
print("written")
"""


def test_write_gguf_huge_alignment_does_not_allocate_its_padding(tmp_path):
    """general.alignment = 2**31 (a power of two: the reader's and llama.cpp's rule):
    the 2 GiB paddings are not allocated (1 GiB of address space is enough), they
    read as zeros, and the file reads back; nothing but the file is left."""
    path = tmp_path / "big.gguf"
    done = subprocess.run([sys.executable, "-c", ALIGN_CHILD, str(path)], capture_output=True,
                          text=True, timeout=300, cwd=Path(tn.__file__).parents[1])
    assert done.returncode == 0 and "written" in done.stdout, done.stderr[-2000:]
    (tmp_path / "big.gguf.warm").unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.gguf"]  # no temporary left
    assert path.stat().st_size == 3 * 2**31  # header, w and v, each padded to 2**31
    model = tn.io.read_gguf(path)
    assert model.alignment == 2**31
    np.testing.assert_array_equal(model["w"], np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(model["v"], np.ones(5, np.float32))
    with open(path, "rb") as f:  # padding between the header and w, and after v: zeros
        f.seek(2**31 - 4096)
        assert f.read(4096) == bytes(4096)
        f.seek(3 * 2**31 - 4096)
        assert f.read(4096) == bytes(4096)
