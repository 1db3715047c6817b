"""Seeds of the VSA generators (issue 15, item 9): randomness as NumPy users expect.

``seed=None`` (the default) draws fresh entropy; an int gives the same vectors on every
device as it always did (random's bytes are pinned from before the change); a
SeedSequence gives a seed from its state, a Generator one drawn from it (advancing it);
random, level, circular and ItemMemory draw from their own streams of one seed.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import tritnum as tn
from tritnum import vsa
from tritnum._interop import to_host

FORMATS = ["dense", "bitplane"]


def dense(x):
    """Hypervectors as a host int8 array, from any device and format."""
    if isinstance(x, tn.PackedTrits):
        return tn.unpack(tn.PackedTrits(to_host(x.data), x.shape, "bitplane"))
    return np.asarray(to_host(x))


def digest(x):
    data = x.data if isinstance(x, tn.PackedTrits) else x
    return hashlib.sha256(np.ascontiguousarray(to_host(data)).tobytes()).hexdigest()[:16]


_DEFAULT = object()


def _first(make):
    """The first vector ``make(d, **kw)`` generates (dense, on the host), ``seed`` passed
    only when given, so that ``_first(make)(d)`` exercises the default."""
    def first(d, seed=_DEFAULT, **kw):
        if seed is not _DEFAULT:
            kw["seed"] = seed
        return dense(make(d, **kw))[0]
    return first


def first_item(d, seed=_DEFAULT, **kw):
    """The first generated vector of an ItemMemory (dense)."""
    if seed is not _DEFAULT:
        kw["seed"] = seed
    return dense(vsa.ItemMemory(d, **kw).add("x"))


# every generator as a function of (d, seed) returning its first vector, dense
FIRST = {
    "random": _first(lambda d, **kw: vsa.random(3, d, **kw)),
    "level": _first(lambda d, **kw: vsa.level(3, d, **kw)),
    "circular": _first(lambda d, **kw: vsa.circular(4, d, **kw)),
    "ItemMemory": first_item,
}


# (n, d, seed, density) and the sha256 (first 16 hex digits) of the dense and bitplane
# bytes of tn.vsa.random, computed with the code before seeds were reworked: an int seed
# must go on giving exactly these vectors
RANDOM_PINS = [
    ((3, 100, 0, 2 / 3), ("e34fc56be7f294a3", "6081f84ef65156a2")),
    ((5, 130, 1, 0.5), ("8390c6b124a23d28", "2a697688a2169fc6")),
    ((2, 64, -7, 1.0), ("30f4751a57700fd0", "b4a951e874ae62f5")),
    ((4, 70, 2**64 + 9, 0.1), ("9336fb44321a8afc", "692a2b5718f88a03")),
    ((1, 1000, 123456789, 2 / 3), ("d8250cdba2fca48b", "54f3534297711262")),
]


def test_random_int_seeds_give_the_pinned_vectors(device):
    for (n, d, seed, density), pins in RANDOM_PINS:
        for fmt, pin in zip(FORMATS, pins, strict=True):
            v = vsa.random(n, d, seed=seed, density=density, format=fmt, device=device)
            assert digest(v) == pin, (n, d, seed, density, fmt)
    # NumPy integers and integers past 64 bits are integers too (taken mod 2**64)
    np.testing.assert_array_equal(vsa.random(2, 50, seed=np.int64(5)), vsa.random(2, 50, seed=5))
    np.testing.assert_array_equal(vsa.random(2, 50, seed=2**64 + 5), vsa.random(2, 50, seed=5))
    np.testing.assert_array_equal(vsa.random(2, 50, seed=-1), vsa.random(2, 50, seed=2**64 - 1))


@pytest.mark.parametrize("kind", list(FIRST))
def test_unseeded_calls_differ(kind):
    make = FIRST[kind]
    a, b = make(500), make(500, None)
    assert not np.array_equal(a, b)
    assert abs(float(vsa.similarity(a, b))) < 0.25


def test_unseeded_defaults_are_not_seed_zero():
    d = 500
    for kind, make in FIRST.items():
        assert not np.array_equal(make(d), make(d, 0)), kind
    assert not np.array_equal(dense(vsa.level(3, d))[0], dense(vsa.random(1, d))[0])


@pytest.mark.parametrize("kind", list(FIRST))
def test_int_seeds_are_reproducible(kind, device):
    make = FIRST[kind]
    a = make(130, 11, device=device)
    np.testing.assert_array_equal(a, make(130, 11, device="numpy"))
    np.testing.assert_array_equal(a, make(130, 11, device=device))
    assert not np.array_equal(a, make(130, 12, device=device))


@pytest.mark.parametrize("kind", list(FIRST))
def test_seed_sequence(kind, device):
    make = FIRST[kind]
    ss = np.random.SeedSequence(2024)
    a = make(130, ss, device=device)
    # a SeedSequence is not consumed: the same sequence (or an equal one) gives the same
    np.testing.assert_array_equal(a, make(130, ss, device=device))
    np.testing.assert_array_equal(a, make(130, np.random.SeedSequence(2024), device="numpy"))
    # it stands for the integer of its first 64-bit word of state
    word = int(np.random.SeedSequence(2024).generate_state(1, np.uint64)[0])
    np.testing.assert_array_equal(a, make(130, word, device=device))
    assert not np.array_equal(a, make(130, np.random.SeedSequence(2025), device=device))
    # spawned children give unrelated vectors
    c0, c1 = ss.spawn(2)
    assert not np.array_equal(make(130, c0), make(130, c1))


@pytest.mark.parametrize("kind", list(FIRST))
def test_generator(kind, device):
    make = FIRST[kind]
    g = np.random.default_rng(7)
    before = g.bit_generator.state
    a = make(130, g, device=device)
    assert g.bit_generator.state != before  # drawn from: it advances
    b = make(130, g, device=device)
    assert not np.array_equal(a, b)  # so a second call gives other vectors
    # ... and a Generator in the same state replays the same series
    h = np.random.default_rng(7)
    np.testing.assert_array_equal(a, make(130, h, device="numpy"))
    np.testing.assert_array_equal(b, make(130, h, device="numpy"))
    # it stands for one uint64 drawn from it
    word = int(np.random.default_rng(7).integers(0, 2**64, dtype=np.uint64))
    np.testing.assert_array_equal(a, make(130, word, device=device))


def test_a_generator_is_not_drawn_from_when_the_call_fails():
    g = np.random.default_rng(3)
    before = g.bit_generator.state
    for call in (lambda: vsa.random(2, 10, density=0, seed=g),
                 lambda: vsa.level(2, 10, density=1.5, seed=g),
                 lambda: vsa.circular(2, 10, density=-1, seed=g),
                 lambda: vsa.ItemMemory(10, density=0, seed=g)):
        with pytest.raises(ValueError, match="density"):
            call()
    assert g.bit_generator.state == before


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**63, np.random.SeedSequence(9)])
def test_generators_draw_independent_streams_of_one_seed(seed):
    """No accidental equalities: the generators' vectors for one seed are unrelated."""
    d = 4000
    rows = {
        "random": dense(vsa.random(4, d, seed=seed)),
        "level": dense(vsa.level(4, d, seed=seed))[[0, -1]],  # its two independent ends
        "circular": dense(vsa.circular(4, d, seed=seed))[[0, 2]],
        "ItemMemory": np.stack([first_item(d, seed)]),
    }
    names = list(rows)
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            sims = vsa.similarity(rows[x][:, None], rows[y][None])
            assert np.abs(sims).max() < 0.1, (x, y)


def test_level_and_random_no_longer_share_rows():
    d = 1000
    for seed in (0, 1, 2, 3):
        assert not np.array_equal(vsa.level(3, d, seed=seed)[0], vsa.random(1, d, seed=seed)[0])
        assert not np.array_equal(vsa.circular(3, d, seed=seed)[0], vsa.level(3, d, seed=seed)[0])
        mem = vsa.ItemMemory(d, seed=seed)
        np.testing.assert_raises(AssertionError, np.testing.assert_array_equal,
                                 mem.add("a"), vsa.random(1, d, seed=seed)[0])


@pytest.mark.parametrize("seed", [True, False, 1.0, np.float64(2.0), "1", b"1", [1, 2],
                                  np.random.RandomState(0), np.array(3)])
@pytest.mark.parametrize("kind", list(FIRST))
def test_other_seed_types_raise_type_error(kind, seed):
    with pytest.raises(TypeError, match=r"seed must be an integer, None, a numpy\.random"):
        FIRST[kind](10, seed)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", [None, np.random.SeedSequence(5), np.random.default_rng(5)])
def test_item_memory_keeps_its_drawn_seed_through_save_and_load(fmt, seed, tmp_path):
    mem = vsa.ItemMemory(70, seed=seed, format=fmt)
    assert isinstance(mem.seed, int) and 0 <= mem.seed < 2**64
    mem.add("a")
    mem.add("b")
    mem.save(tmp_path / "m.npz")
    back = vsa.ItemMemory.load(tmp_path / "m.npz")
    assert back.seed == mem.seed
    # the loaded memory goes on with the same generator
    np.testing.assert_array_equal(dense(back.add("c")), dense(mem.add("c")))
    # ... which is the memory's with that integer seed
    again = vsa.ItemMemory(70, seed=mem.seed, format=fmt)
    for s in ("a", "b", "c"):
        np.testing.assert_array_equal(dense(again.add(s)), dense(mem[s]))


def test_unseeded_item_memories_differ():
    a, b = vsa.ItemMemory(200), vsa.ItemMemory(200)
    assert a.seed != b.seed
    assert not np.array_equal(a.add("x"), b.add("x"))
