"""One or a few hypervectors (issue 29 item 2): the fast route against the general one and NumPy.

``bind``, ``unbind``, ``negate`` and ``permute`` send two host arrays of one shape (C-contiguous
int8, or checked "bitplane" PackedTrits) straight to the CPU kernels, one pair of rows through
kernels without row indexes. Each test runs the same inputs through the fast route and the
general one (the fast route turned off) and asks for the NumPy reference's trits, the same
bits, or the same typed error and message.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tritnum as tn
from tritnum._kernels.cpu import vsa as cpu_vsa
from tritnum.vsa import algebra


def _mod3(x: np.ndarray) -> np.ndarray:
    return ((x.astype(np.int16) + 1) % 3 - 1).astype(np.int8)


# name, the call, the NumPy reference on int8 trits
_OPS = {
    "bind": (lambda a, b: tn.vsa.bind(a, b), lambda a, b: a * b),
    "bind mod3": (lambda a, b: tn.vsa.bind(a, b, rule="mod3"), lambda a, b: _mod3(a - b)),
    "unbind": (lambda a, b: tn.vsa.unbind(a, b, device="cpu"), lambda a, b: a * b),
    "unbind mod3": (lambda a, b: tn.vsa.unbind(a, b, rule="mod3"), lambda a, b: _mod3(a + b)),
    "negate": (lambda a, b: tn.vsa.negate(a), lambda a, b: -a),
    "permute": (lambda a, b: tn.vsa.permute(a), lambda a, b: np.roll(a, 1, axis=-1)),
    "permute -70": (lambda a, b: tn.vsa.permute(a, -70, device="cpu"),
                    lambda a, b: np.roll(a, -70, axis=-1)),
}


def _general(fn, *args):
    with pytest.MonkeyPatch.context() as m:
        m.setattr(algebra, "_host_pair", lambda *a: None)
        return fn(*args)


def _fast(fn, *args):
    """``fn(*args)``, asserting that the fast route answered."""
    seen = []
    fast = algebra._host_pair
    with pytest.MonkeyPatch.context() as m:
        m.setattr(algebra, "_host_pair", lambda *a: seen.append(fast(*a)) or seen[-1])
        out = fn(*args)
    assert seen and seen[0] is not None
    return out


def _trits(x):
    return tn.unpack(x) if isinstance(x, tn.PackedTrits) else x


@given(d=st.sampled_from([1, 63, 64, 65, 256, 1000]) | st.integers(1, 300),
       lead=st.sampled_from([(), (1,), (3,), (2, 2), (17,)]), packed=st.booleans(),
       name=st.sampled_from(sorted(_OPS)), seed=st.integers(0, 2**32 - 1))
def test_fast_route_gives_numpy_and_the_general_route(d, lead, packed, name, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.integers(-1, 2, (*lead, d), dtype=np.int8) for _ in range(2))
    call, reference = _OPS[name]
    x, y = (tn.pack(v, "bitplane") for v in (a, b)) if packed else (a, b)
    got = _fast(call, x, y)
    want = _general(call, x, y)
    assert type(got) is type(want)
    np.testing.assert_array_equal(_trits(got), reference(a, b), strict=True)
    if packed:
        assert got.shape == want.shape == a.shape and got.format == "bitplane"
        np.testing.assert_array_equal(got.data, want.data, strict=True)
        assert not got.data.flags.writeable
    else:
        np.testing.assert_array_equal(got, want, strict=True)


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "bitplane"])
@pytest.mark.parametrize("shape", [(256,), (1, 256)])
def test_one_pair_runs_the_kernels_without_row_indexes(monkeypatch, shape, packed):
    name = "_op_planes_one" if packed else "_op_dense_one"
    kernel, calls = getattr(cpu_vsa, name), []
    monkeypatch.setattr(cpu_vsa, name, lambda *args: calls.append(1) or kernel(*args))
    a, b = tn.vsa.random(2, shape[-1], seed=7)
    a, b = a.reshape(shape), b.reshape(shape)
    if packed:
        got = tn.unpack(tn.vsa.bind(tn.pack(a, "bitplane"), tn.pack(b, "bitplane")))
    else:
        got = tn.vsa.bind(a, b)
    assert calls == [1]
    np.testing.assert_array_equal(got, a * b, strict=True)


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "bitplane"])
@pytest.mark.parametrize(("lead_a", "lead_b"), [((5,), (5,)), ((2, 3), (2, 3)), ((5,), (1,)),
                                                ((1,), (5,)), ((5,), ()), ((2, 3), (3,))])
@pytest.mark.parametrize("rule", ["mul", "mod3"])
def test_rows_in_order_take_one_loop_and_broadcast_rows_their_indexes(
        monkeypatch, packed, lead_a, lead_b, rule):
    name = "_op_planes_all" if packed else "_op_dense_all"
    kernel, calls = getattr(cpu_vsa, name), []
    monkeypatch.setattr(cpu_vsa, name, lambda *args: calls.append(1) or kernel(*args))
    rng = np.random.default_rng(len(lead_a) + 3 * len(lead_b))
    a = rng.integers(-1, 2, (*lead_a, 130), dtype=np.int8)
    b = rng.integers(-1, 2, (*lead_b, 130), dtype=np.int8)
    x, y = (tn.pack(v, "bitplane") for v in (a, b)) if packed else (a, b)
    got = _trits(tn.vsa.bind(x, y, rule=rule))
    assert calls == [1]
    np.testing.assert_array_equal(got, a * b if rule == "mul" else _mod3(a - b), strict=True)


def _corrupt_plane() -> tn.PackedTrits:
    data = tn.pack(np.zeros(70, np.int8), "bitplane").data.copy()
    data[:, 1] = 1  # trit 64 has both its plus and its minus bit set
    return tn.PackedTrits(data, (70,), "bitplane")


_V = np.array([1, -1, 0, 1, 0], np.int8)
_P = tn.pack(_V, "bitplane")
_BAD = {
    "dense value 2": lambda: tn.vsa.bind(_V, np.array([1, 2, 0, 1, 0], np.int8)),
    "one row value -3": lambda: tn.vsa.bind(np.array([[1, 0, -3, 1, 0]], np.int8), _V[None]),
    "negate value 7": lambda: tn.vsa.negate(np.array([1, 7, 0], np.int8)),
    "rows value 3": lambda: tn.vsa.bind(np.tile(_V, (4, 1)),
                                        np.where(np.arange(20).reshape(4, 5) == 11, 3,
                                                 1).astype(np.int8)),
    "unbind mod3 value 4": lambda: tn.vsa.unbind(_V, np.array([0, 0, 0, 0, 4], np.int8),
                                                 rule="mod3"),
    "permute value 5": lambda: tn.vsa.permute(np.array([[1, 5, 0]], np.int8)),
    "int16 value 5": lambda: tn.vsa.bind(_V.astype(np.int16), np.full(5, 5, np.int16)),
    "corrupt planes": lambda: tn.vsa.bind(_corrupt_plane(), _corrupt_plane()),
    "dimensions": lambda: tn.vsa.bind(_V[None], np.zeros((1, 4), np.int8)),
    "bitplane dimensions": lambda: tn.vsa.bind(_P, tn.pack(_V[:4], "bitplane")),
    "leading shapes": lambda: tn.vsa.bind(np.zeros((2, 5), np.int8), np.zeros((3, 5), np.int8)),
    "mixed kinds": lambda: tn.vsa.bind(_V, _P),
    "2bit": lambda: tn.vsa.bind(tn.pack(_V, "2bit"), tn.pack(_V, "2bit")),
    "rule": lambda: tn.vsa.bind(_V, _V, rule="xor"),
    "rule None": lambda: tn.vsa.bind(_P, _P, rule=None),
    "device name": lambda: tn.vsa.bind(_P, _P, device="gpu"),
    "negate device name": lambda: tn.vsa.negate(_V, device="GPU"),
    "float shift": lambda: tn.vsa.permute(_P, 1.5),
    "shifts shape": lambda: tn.vsa.permute(_V[None], [1, 2]),
    "bool trits": lambda: tn.vsa.bind(_V.astype(bool), _V.astype(bool)),
}


@pytest.mark.parametrize("name", sorted(_BAD))
def test_bad_one_pair_inputs_raise_the_same_errors_both_ways(name):
    with pytest.raises(Exception) as fast:
        _BAD[name]()
    with pytest.raises(Exception) as slow:
        _general(_BAD[name])
    assert type(fast.value) is type(slow.value) and str(fast.value) == str(slow.value)
    assert isinstance(fast.value, (TypeError, ValueError))  # the typed errors subclass these
