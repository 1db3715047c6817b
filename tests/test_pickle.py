"""Packed objects pickle compactly (their packed bytes, as Dask ships them between
processes) and come back owned and read-only, like constructed ones; files never unpickle."""

import pickle

import numpy as np
import pytest

import tritnum as tn

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("fmt", tn.FORMATS)
def test_packed_trits_round_trip_compactly(fmt):
    t = RNG.integers(-1, 2, (300, 1000), dtype=np.int8)
    p = tn.pack(t, fmt)
    blob = pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL)
    assert p.nbytes <= len(blob) < p.nbytes + 1024  # the packed bytes, not the trits
    back = pickle.loads(blob)
    assert back == p and back.format == fmt and back.shape == p.shape
    assert not back.data.flags.writeable and back._valid
    with pytest.raises(ValueError, match="read-only"):
        back.data[0] = 0
    np.testing.assert_array_equal(tn.unpack(back), t)
    rows = p[10:12]  # a view of two rows pickles two rows
    assert len(pickle.dumps(rows)) < rows.nbytes + 1024


def test_wrapped_bytes_stay_unchecked_until_used():
    data = np.full((2, 1), 0xFF, np.uint8)
    back = pickle.loads(pickle.dumps(tn.PackedTrits(data, (2, 3), "2bit")))
    assert not back._valid
    with pytest.raises(tn.InvalidTritsError):
        tn.unpack(back)


@pytest.mark.parametrize("group_size", [None, 100, 1000])
def test_ternary_tensor_round_trips(group_size):
    w = tn.quantize(RNG.standard_normal((256, 1000)), group_size=group_size)
    blob = pickle.dumps(w)
    assert len(blob) < w.nbytes + 2048
    back = pickle.loads(blob)
    assert back.group_size == group_size and back.packed == w.packed
    np.testing.assert_array_equal(back.scales, w.scales)
    assert not back.scales.flags.writeable and not back.packed.data.flags.writeable
    x = RNG.standard_normal((3, 1000)).astype(np.float32)
    np.testing.assert_array_equal(tn.linear(x, back), tn.linear(x, w))


@pytest.mark.parametrize("fmt", ["dense", "bitplane"])
def test_item_memory_round_trips_packed(fmt):
    mem = tn.vsa.ItemMemory(10_000, seed=3, format=fmt)
    for s in range(40):
        mem.add(s)
    mem.add("given", tn.vsa.random(1, 10_000, seed=8)[0])
    blob = pickle.dumps(mem)
    packed_rows = tn.nbytes((41, 10_000), "2bit")  # 2 bits a trit, as the bit planes
    assert len(blob) < packed_rows * 1.05 + 2048
    back = pickle.loads(blob)
    assert back.symbols == mem.symbols and back.seed == mem.seed and len(back) == 41
    assert back.vectors == mem.vectors if fmt == "bitplane" else (back.vectors == mem.vectors).all()
    back.add("next")  # it goes on generating the same rows
    mem.add("next")
    assert (tn.unpack(back["next"]) if fmt == "bitplane" else back["next"]).tolist() == (
        tn.unpack(mem["next"]) if fmt == "bitplane" else mem["next"]).tolist()


def test_files_never_unpickle(tmp_path):
    path = tmp_path / "objects.npz"
    objects = np.empty(1, object)
    objects[0] = tn.pack([1, 0])  # a pickled PackedTrits inside the file
    np.savez(path, w=objects)
    with pytest.raises(tn.FormatError):
        tn.load(path)
