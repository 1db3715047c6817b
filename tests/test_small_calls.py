"""Small calls (issue 29 item 2): the fast route of plain NumPy arguments against the general one.

``tn.linear`` and the NumPy ``BitLinear`` send plain C-contiguous NumPy arguments straight
to the CPU kernels; every other argument, and every bad one, takes the general route.
Each test runs the same inputs through both (the general route forced by turning the
fast one off) and asks for the same bits, or the same typed error and message.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tritnum as tn
from tritnum import matmul as mm
from tritnum._kernels.cpu import group_gemv, q8k
from tritnum.errors import ShapeMismatchError


@pytest.fixture
def general(monkeypatch):
    """A function running its call with the fast route turned off."""

    def run(fn, *args, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(mm, "_host_call", lambda *a: None)
            if isinstance(fn, tn.BitLinear):
                m.setattr(fn, "_step", None)  # nor the layer's kept one-call route
            return fn(*args, **kwargs)

    return run


def _taken(monkeypatch) -> list[bool]:
    """Record whether each call's fast route answered."""
    seen: list[bool] = []
    fast = mm._host_call

    def spy(*args):
        y = fast(*args)
        seen.append(y is not None)
        return y

    monkeypatch.setattr(mm, "_host_call", spy)
    return seen


def _fast_gives_the_general_bits(x, w, bias, activations, with_out):
    """``tn.linear`` answers on the fast route with the general route's bits (and ``out``)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(mm, "_host_call", lambda *a: None)
        ref = tn.linear(x, w, bias, activations=activations)
    shape = (*x.shape[:-1], w.shape[0])
    out = np.full(shape, np.nan, np.float32) if with_out else None
    seen: list[bool] = []
    fast = mm._host_call
    with pytest.MonkeyPatch.context() as m:
        m.setattr(mm, "_host_call", lambda *a: seen.append(fast(*a)) or seen[-1])
        y = tn.linear(x, w, bias, activations=activations, out=out)
    assert seen[0] is not None  # the fast route answered
    assert y.shape == ref.shape == shape and y.dtype == np.float32
    np.testing.assert_array_equal(y.view(np.uint32), ref.view(np.uint32))
    if with_out:
        assert y is out


@given(
    data=st.data(),
    n_blocks=st.sampled_from([1, 2, 3, 4]),  # 4: rows of whole AVX-512 blocks
    nout=st.integers(1, 9),
    lead=st.sampled_from([(), (1,), (3,), (2, 2), (17,)]),
    group=st.sampled_from([None, 32, 64]),
    fmt=st.sampled_from(["2bit", "base3", "bitplane"]),
    activations=st.sampled_from(["float", "int8", "q8_k", "q8_k_unfused"]),
    dtype=st.sampled_from([np.float32, np.float64, np.float16]),
    with_bias=st.booleans(),
    with_out=st.booleans(),
)
def test_fast_route_gives_the_general_routes_bits(data, n_blocks, nout, lead, group, fmt,
                                                  activations, dtype, with_bias, with_out):
    q8k = activations.startswith("q8_k")  # Q8_K blocks: 256 inputs, groups of whole blocks
    n = 256 * (1 + n_blocks % 2) if q8k else 64 * n_blocks
    group = 256 if q8k and group else group
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    w = tn.quantize(rng.standard_normal((nout, n)), group_size=group, format=fmt)
    x = rng.standard_normal((*lead, n)).astype(dtype)
    bias = rng.standard_normal(nout).astype(np.float32) if with_bias else None
    _fast_gives_the_general_bits(x, w, bias, activations, with_out)


def _one_call_route(w: tn.TernaryTensor):
    """The one-call routes ``tn.linear`` keeps with ``w`` (``small_linear.small_rows``) as one
    callable; None where there are none."""
    tn.linear(np.ones(w.shape[1], np.float32), w)  # the fast route keeps its weights
    routes = w._cache["cpu_linear"][-1]
    if not routes:
        return None

    def call(x, bias, out, mode):
        """The result and its bad rows as the route of ``mode`` gives them; None: no route."""
        run, most = routes.get(mode, (None, -1))
        if x.shape[0] > most:
            return None
        y = np.empty((x.shape[0], w.shape[0]), np.float32) if out is None else out
        return y, run(x, np.zeros(0, np.float32) if bias is None else bias, y)

    return call


def _one_call_gives_the_general_bits(general, w, small, activations, rows, bad_row):
    """Every call of ``small`` that answers has the general route's bits, into ``out`` too.

    Row 0 of ``x`` holds NaN where ``bad_row``. Returns whether every call answered.
    """
    rng = np.random.default_rng(rows)
    bias = rng.standard_normal(w.shape[0]).astype(np.float32)
    x = rng.standard_normal((rows, w.shape[1])).astype(np.float32)
    if bad_row:
        x[0, 7] = np.nan
    ref = general(tn.linear, x, w, bias, activations=activations, check_finite=False)
    answered = True
    for out in (None, np.full((rows, w.shape[0]), np.nan, np.float32)):
        done = small(x, bias, out, activations)
        if done is None:
            answered = False
            continue
        y, bad = done
        assert bad == bad_row and (out is None or y is out)
        np.testing.assert_array_equal(y.view(np.uint32), ref.view(np.uint32))
    return answered


@pytest.mark.parametrize("fmt", ["2bit", "bitplane", "base3"])
@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("activations", ["float", "int8"])
def test_small_layers_in_groups_answer_in_one_call_with_the_general_routes_bits(
        general, fmt, group, activations):
    w = tn.quantize(np.random.default_rng(group).standard_normal((40, 256)), group_size=group,
                    format=fmt)
    small = _one_call_route(w)
    assert small is not None
    int8 = activations == "int8"
    for rows in (1, 3, 16):  # int8: a NaN row gets a NaN scale and outputs, counted
        answered = _one_call_gives_the_general_bits(general, w, small, activations, rows, int8)
        # int8 takes the packed routes where the GEMV on laid-out rows does not exist
        assert answered or (int8 and group_gemv.ROW_TILE is None)
    assert small(np.ones((17, 256), np.float32), None, None, activations) is None  # past a GEMV


@pytest.mark.parametrize("fmt", ["2bit", "bitplane", "base3"])
@pytest.mark.parametrize(("out", "kw"), [(40, {}), (40, {"axis": -1}), (40, {"group_size": 256}),
                                         (2052, {})])  # 2052 x 512: past a small layer's codes
@pytest.mark.parametrize("activations", ["q8_k", "q8_k_unfused"])
def test_a_q8k_row_on_small_weights_answers_in_one_call_with_the_general_routes_bits(
        general, fmt, out, kw, activations):
    w = tn.quantize(np.random.default_rng(out).standard_normal((out, 512)), format=fmt, **kw)
    small = _one_call_route(w)
    if q8k.dot_q8k_vnni is None:  # the VNNI GEMV's CPUs only
        assert small is None or small(np.ones((1, 512), np.float32), None, None,
                                      activations) is None
        return
    assert _one_call_gives_the_general_bits(general, w, small, activations, 1, False)
    assert small(np.ones((2, 512), np.float32), None, None, activations) is None  # one row
    x = np.ones((1, 512), np.float32)
    x[0, 300] = np.inf
    out_ = np.full((1, out), 7, np.float32)
    assert small(x, None, out_, activations)[1] == 1 and (out_ == 7).all()  # nothing written
    with pytest.raises(ValueError, match=r"x\[0, 300\] = inf is not finite"):
        tn.linear(x, w, activations=activations, out=out_, check_finite=False)
    assert (out_ == 7).all()


# weights of each route: a small layer's codes, a small layer in groups, past both
_LAYERS = {"small": (40, {}), "groups": (40, {"group_size": 256}), "large": (2052, {})}


@pytest.mark.parametrize("layer", list(_LAYERS))
@pytest.mark.parametrize("activations", ["float", "int8", "q8_k"])
@pytest.mark.parametrize("route", ["fast", "general"])
def test_a_bias_inside_out_gives_the_bits_of_its_copy(general, layer, activations, route):
    nout, kw = _LAYERS[layer]
    rng = np.random.default_rng(nout)
    w = tn.quantize(rng.standard_normal((nout, 512)), **kw)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    out = rng.standard_normal((3, nout)).astype(np.float32)
    want = tn.linear(x, w, out[1].copy(), activations=activations)
    run = tn.linear if route == "fast" else lambda *a, **k: general(tn.linear, *a, **k)
    assert run(x, w, out[1], activations=activations, out=out) is out  # the bias: a row of out
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("layer", list(_LAYERS))
@pytest.mark.parametrize("activations", ["int8", "q8_k", "q8_k_unfused"])
@pytest.mark.parametrize("route", ["fast", "general"])
def test_a_refused_call_writes_nothing_into_out(general, layer, activations, route):
    nout, kw = _LAYERS[layer]
    w = tn.quantize(np.random.default_rng(0).standard_normal((nout, 512)), **kw)
    run = tn.linear if route == "fast" else lambda *a, **k: general(tn.linear, *a, **k)
    for rows in (1, 3):
        x = np.ones((rows, 512), np.float32)
        x[-1, 5] = np.nan
        out = np.full((rows, nout), 7, np.float32)
        with pytest.raises(ValueError, match=rf"x\[{rows - 1}, 5\] = nan is not finite"):
            run(x, w, activations=activations, out=out)
        assert (out == 7).all()


@pytest.mark.parametrize("activations", ["int8", "float"])
@pytest.mark.parametrize("d", [64, 256])
def test_bitlinear_takes_the_fast_route_with_the_same_bits(monkeypatch, general, activations, d):
    rng = np.random.default_rng(d)
    layer = tn.BitLinear(rng.standard_normal((d, d)), bias=rng.standard_normal(d),
                         activations=activations)
    x = rng.standard_normal(d).astype(np.float32)
    ref = general(layer, x)
    seen = _taken(monkeypatch)
    y = layer(x)
    y2 = layer(x)
    assert seen == [True, True]
    assert y is not y2 and not np.shares_memory(y, y2)  # fresh arrays each call
    np.testing.assert_array_equal(y.view(np.uint32), ref.view(np.uint32))
    out = np.empty(d, np.float32)
    assert layer(x, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize(("activations", "d"), [("int8", 64), ("int8", 256), ("float", 64),
                                                  ("float", 256), ("q8_k", 256)])
def test_bitlinear_keeps_its_one_call_route_for_its_weights_bias_and_mode(
        monkeypatch, general, activations, d):
    rng = np.random.default_rng(d)
    layer = tn.BitLinear(rng.standard_normal((d, d)), bias=rng.standard_normal(d),
                         activations=activations)
    x = rng.standard_normal((1, d)).astype(np.float32)
    seen = _taken(monkeypatch)
    ys = [layer(x) for _ in range(3)]
    kept = activations != "q8_k" or q8k.dot_q8k_vnni is not None  # a route of one call
    assert seen == ([True] if kept else [True] * 3)  # then the layer's route answers
    assert len({id(y) for y in ys}) == 3  # fresh arrays each call
    for y in ys:
        np.testing.assert_array_equal(y.view(np.uint32), general(layer, x).view(np.uint32))
    bad = np.repeat(x, 2, axis=0)
    bad[1, 5] = np.nan
    if activations == "float":  # NaN goes through, as in NumPy
        np.testing.assert_array_equal(layer(bad).view(np.uint32),
                                      general(layer, bad).view(np.uint32))
    for rows in (bad, bad[1:]) if activations != "float" else ():
        with pytest.raises(ValueError, match=r"x\[\d, 5\] = nan is not finite"):
            layer(rows)
        if activations == "q8_k":  # as the general route: Q8_K blocks of NaN are refused
            with pytest.raises(ValueError, match=r"x\[\d, 5\] = nan is not finite"):
                layer(rows, check_finite=False)
    if activations == "int8":  # NaN outputs for that row, the others as they are
        y = layer(bad, check_finite=False)
        assert np.isnan(y[1]).all()
        np.testing.assert_array_equal(y[0], ys[0][0])
    # into out: the same bits; nothing written when a row is refused
    for rows in (x,) if activations == "q8_k" else (x, np.repeat(x, 3, axis=0)):  # Q8_K: 1 row
        out = np.full((len(rows), d), 7, np.float32)
        assert layer(rows, out=out) is out
        np.testing.assert_array_equal(out.view(np.uint32), general(layer, rows).view(np.uint32))
    if activations != "float":
        out = np.full((1, d), 7, np.float32)
        with pytest.raises(ValueError, match="is not finite"):
            layer(bad[1:], out=out, check_finite=activations != "q8_k")
        assert (out == 7).all()
    if kept:
        assert seen == [True]  # every call above on the kept route
    # the route follows each of the layer's attributes
    changes = {"bias": rng.standard_normal(d).astype(np.float32),
               "weight": tn.quantize(rng.standard_normal((d, d))),
               "activations": "float" if activations == "int8" else "int8"}
    for name, value in changes.items():
        setattr(layer, name, value)
        for _ in range(2):
            np.testing.assert_array_equal(layer(x).view(np.uint32),
                                          general(layer, x).view(np.uint32))
    layer.bias += 1  # in place: read on each call, as tn.linear reads it
    np.testing.assert_array_equal(layer(x).view(np.uint32), general(layer, x).view(np.uint32))
    with pytest.raises(ShapeMismatchError):  # as the general route (a 0-d x)
        layer(np.array(1.0, np.float32))
    layer.bias = np.zeros(d - 1, np.float32)  # checked again: never read past its end
    with pytest.raises(ShapeMismatchError, match="bias"):
        layer(x)


@pytest.mark.parametrize("kw", [{}, {"group_size": 64}])
def test_a_called_bitlinear_pickles_and_runs_again(kw):
    rng = np.random.default_rng(9)
    layer = tn.BitLinear(rng.standard_normal((128, 256)), bias=rng.standard_normal(128), **kw)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    want = layer(x)
    layer(x)  # its route kept (a closure of the GEMV in groups: not picklable)
    again = pickle.loads(pickle.dumps(layer))
    for _ in range(2):
        np.testing.assert_array_equal(again(x).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("activations", ["float", "int8"])
def test_bitlinear_into_out_reads_a_bias_inside_out_as_it_was(general, activations):
    rng = np.random.default_rng(5)
    out = rng.standard_normal((4, 64)).astype(np.float32)
    layer = tn.BitLinear(rng.standard_normal((64, 64)), bias=out[1], activations=activations)
    layer.bias = out[1]  # the layer's bias, a row of out (the layer itself keeps a copy)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    want = general(layer, x)
    layer(x)  # the route kept
    assert layer(x, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


def test_other_arguments_take_the_general_route(monkeypatch):
    rng = np.random.default_rng(1)
    w = tn.quantize(rng.standard_normal((4, 64)))
    x = rng.standard_normal((2, 64)).astype(np.float32)
    seen = _taken(monkeypatch)
    tn.linear(x.T.copy().T, w)  # Fortran order
    tn.linear(x.tolist(), w)
    tn.linear(x, w, np.zeros(4))  # a float64 bias is converted by the general route
    tn.linear(x, w, device="numpy")
    tn.linear((x * 127).astype(np.int8), w, activations="int8", x_scale=np.float32(1 / 127))
    assert seen == [False] * 5


_W = tn.quantize(np.random.default_rng(2).standard_normal((4, 64)))
_X = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)
_NAN = _X.copy()
_NAN[1, 5] = np.nan
_W256 = tn.quantize(np.random.default_rng(4).standard_normal((4, 256)))
_NAN256 = np.random.default_rng(5).standard_normal((2, 256)).astype(np.float32)
_NAN256[1, 9] = np.inf

# (x, w, keyword arguments) -> the error the general route raises today
BAD = [
    pytest.param(_X[:, :63].copy(), _W, {}, ShapeMismatchError, id="features"),
    pytest.param(np.float32(1.0), _W, {}, ShapeMismatchError, id="scalar x"),
    pytest.param(_X.astype(np.int32), _W, {}, TypeError, id="int x"),
    pytest.param(_X.astype(np.int8), _W, {}, TypeError, id="int8 x without scale"),
    pytest.param(_X.astype(np.complex64), _W, {}, TypeError, id="complex x"),
    pytest.param(_X, _W, {"x_scale": 1.0}, TypeError, id="x_scale with float x"),
    pytest.param(_X, _W.T, {}, TypeError, id="w.T"),
    pytest.param(_X, np.ones((4, 64)), {}, TypeError, id="dense w"),
    pytest.param(_X, _W, {"bias": np.zeros(5, np.float32)}, ShapeMismatchError, id="bias shape"),
    pytest.param(_X, _W, {"bias": np.zeros(4, bool) == 0}, TypeError, id="bool bias"),
    pytest.param(_X, _W, {"activations": "int4"}, ValueError, id="activations"),
    pytest.param(_X, _W, {"activations": "q8_k"}, ShapeMismatchError, id="q8_k blocks"),
    pytest.param(_NAN256, tn.quantize(np.ones((4, 256)), group_size=128),
                 {"activations": "q8_k"}, ValueError, id="q8_k groups"),
    pytest.param(_NAN256, _W256, {"activations": "q8_k"}, ValueError, id="inf, q8_k"),
    pytest.param(_NAN256, _W256, {"activations": "q8_k_unfused", "check_finite": False},
                 ValueError, id="inf, q8_k, unchecked"),
    pytest.param(_X, _W, {"device": "gpu"}, ValueError, id="device name"),
    pytest.param(_NAN, _W, {"activations": "int8"}, ValueError, id="NaN, int8"),
    pytest.param(_X, _W, {"out": np.empty((2, 4), np.float64)}, TypeError, id="out dtype"),
    pytest.param(_X, _W, {"out": np.empty((2, 5), np.float32)}, ShapeMismatchError,
                 id="out shape"),
    pytest.param(_X, _W, {"out": np.empty((4, 2), np.float32).T}, ValueError,
                 id="out strided"),
]


@pytest.mark.parametrize(("x", "w", "kwargs", "error"), BAD)
def test_bad_inputs_raise_the_same_errors_both_ways(general, x, w, kwargs, error):
    with pytest.raises(error) as fast:
        tn.linear(x, w, **kwargs)
    with pytest.raises(error) as slow:
        general(tn.linear, x, w, **kwargs)
    assert type(fast.value) is type(slow.value) and str(fast.value) == str(slow.value)


def _corrupt() -> tn.TernaryTensor:
    data = tn.pack(np.zeros((3, 64), np.int8)).data.copy()
    data[2, 1] = 0xFF  # code 3
    return tn.TernaryTensor(tn.PackedTrits(data, (3, 64), "2bit"), np.float32(1))


@pytest.mark.parametrize("activations", ["float", "int8"])
def test_corrupt_weights_are_refused_both_ways(general, activations):
    w = _corrupt()
    for run in (tn.linear, lambda *a, **k: general(tn.linear, *a, **k)):
        for _ in range(2):  # never remembered as checked: every call refuses it
            with pytest.raises(tn.InvalidTritsError, match=r"byte \(2, 1\) = 0xff"):
                run(_X, w, activations=activations)


def test_read_only_out_is_refused_both_ways(general):
    out = np.empty((2, 4), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        tn.linear(_X, _W, out=out)
    with pytest.raises(ValueError, match="writeable"):
        general(tn.linear, _X, _W, out=out)


# ------------------------------------------------------------------ hypervectors
def _vsa_general(monkeypatch):
    """Turn the hypervectors' fast route off (bind, unbind, negate, similarity)."""
    from tritnum.vsa import algebra, similarity_search

    monkeypatch.setattr(algebra, "_host_pair", lambda *a: None)
    monkeypatch.setattr(similarity_search, "_host_pair", lambda *a: None)


def _same(x, y):
    if isinstance(x, tn.PackedTrits):
        assert isinstance(y, tn.PackedTrits) and x.shape == y.shape
        x, y = x.data, y.data
    assert type(x) is type(y)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y), strict=True)


_VSA_OPS = [
    ("bind", lambda a, b: tn.vsa.bind(a, b)),
    ("bind mod3", lambda a, b: tn.vsa.bind(a, b, rule="mod3")),
    ("unbind mod3", lambda a, b: tn.vsa.unbind(a, b, rule="mod3")),
    ("negate", lambda a, b: tn.vsa.negate(a)),
    ("permute", lambda a, b: tn.vsa.permute(a, 3)),
    ("permute per row",
     lambda a, b: tn.vsa.permute(a, np.arange(a.size // 200).reshape(a.shape[:-1]) - 9)),
    ("cosine", lambda a, b: tn.vsa.similarity(a, b)),
    ("dot", lambda a, b: tn.vsa.similarity(a, b, "dot")),
    ("hamming", lambda a, b: tn.vsa.similarity(a, b, "hamming", device="cpu")),
]


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "bitplane"])
@pytest.mark.parametrize("lead", [(), (3,), (2, 2)])
@pytest.mark.parametrize("name, op", _VSA_OPS, ids=[n for n, _ in _VSA_OPS])
def test_hypervector_fast_route_gives_the_general_routes_results(monkeypatch, name, op, lead,
                                                                 packed):
    from tritnum.vsa import algebra

    rng = np.random.default_rng(len(lead))
    a, b = (rng.integers(-1, 2, (*lead, 200), dtype=np.int8) for _ in range(2))
    if packed:
        a, b = tn.pack(a, "bitplane"), tn.pack(b, "bitplane")
    seen = []
    fast = algebra._host_pair
    with monkeypatch.context() as m:
        m.setattr(algebra, "_host_pair", lambda *args: seen.append(fast(*args)) or seen[-1])
        if name in ("cosine", "dot", "hamming"):
            from tritnum.vsa import similarity_search

            m.setattr(similarity_search, "_host_pair", algebra._host_pair)
        got = op(a, b)
    assert seen and seen[0] is not None  # the fast route answered
    _vsa_general(monkeypatch)
    _same(got, op(a, b))


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "bitplane"])
@pytest.mark.parametrize("axis", [0, -2])
@pytest.mark.parametrize("n", [1, 2, 5])
def test_bundle_fast_route_gives_the_general_routes_results(monkeypatch, n, axis, packed):
    from tritnum.vsa import algebra

    vs = np.random.default_rng(n).integers(-1, 2, (n, 130), dtype=np.int8)
    if packed:
        vs = tn.pack(vs, "bitplane")
    seen = []
    fast = algebra._host_pair
    with monkeypatch.context() as m:
        m.setattr(algebra, "_host_pair", lambda *args: seen.append(fast(*args)) or seen[-1])
        got = tn.vsa.bundle(vs, axis)
    assert seen and seen[0] is not None
    _vsa_general(monkeypatch)
    _same(got, tn.vsa.bundle(vs, axis))


_A = np.array([1, -1, 0, 1], np.int8)
_BAD_HV = [
    pytest.param(lambda: tn.vsa.bind(_A, np.array([1, 2, 0, 1], np.int8)), id="bind value 2"),
    pytest.param(lambda: tn.vsa.similarity(_A, np.array([1, 0, -3, 1], np.int8)),
                 id="similarity value -3"),
    pytest.param(lambda: tn.vsa.bind(_A, _A[:3].copy()), id="dimensions"),
    pytest.param(lambda: tn.vsa.permute(np.array([1, 0, 5], np.int8)), id="permute value 5"),
    pytest.param(lambda: tn.vsa.permute(_A, 1.5), id="float shift"),
    pytest.param(lambda: tn.vsa.bundle(np.array([[1, 0], [7, 1]], np.int8)), id="bundle value 7"),
    pytest.param(lambda: tn.vsa.bundle(_A), id="bundle 1-D"),
    pytest.param(lambda: tn.vsa.bundle(_A[None], axis=1), id="bundle trit axis"),
    pytest.param(lambda: tn.vsa.bundle(_A[None], axis=True), id="bundle bool axis"),
    pytest.param(lambda: tn.vsa.permute(_A, [1, 2]), id="shifts shape"),
    pytest.param(lambda: tn.vsa.bind(_A, tn.pack(_A, "bitplane")), id="mixed kinds"),
    pytest.param(lambda: tn.vsa.bind(tn.pack(_A, "2bit"), tn.pack(_A, "2bit")), id="2bit"),
    pytest.param(lambda: tn.vsa.similarity(_A, _A, "euclid"), id="metric"),
    pytest.param(lambda: tn.vsa.bind(_A, _A, rule="xor"), id="rule"),
    pytest.param(lambda: tn.vsa.bind(_A, _A, device="gpu"), id="device name"),
    pytest.param(lambda: tn.vsa.similarity(np.ones((2, 4), np.int8), np.ones((3, 4), np.int8)),
                 id="leading shapes"),
]


@pytest.mark.parametrize("call", _BAD_HV)
def test_bad_hypervectors_raise_the_same_errors_both_ways(monkeypatch, call):
    with pytest.raises(Exception) as fast:
        call()
    _vsa_general(monkeypatch)
    with pytest.raises(Exception) as slow:
        call()
    assert type(fast.value) is type(slow.value) and str(fast.value) == str(slow.value)
    assert isinstance(fast.value, (TypeError, ValueError))  # the typed errors subclass these
