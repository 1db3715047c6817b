"""tn.vsa on the NumPy and CPU backends: against the reference and independent formulas, exactly."""

import ast
import hashlib
import pathlib
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tritnum as tn
from tritnum import vsa
from tritnum.testing import trit_arrays

MASK = (1 << 64) - 1


# ------------------------------------------------------------------ helpers
def fmix64(x):
    """murmur3's finalizer on Python ints (an independent transcription)."""
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & MASK
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & MASK
    return x ^ (x >> 33)


def python_trit(seed, row, col, density):
    key = fmix64(seed % 2**64)
    rkey = fmix64((key + row * 0x9E3779B97F4A7C15) & MASK)
    h = fmix64((rkey + col * 0xD1B54A32D192ED03) & MASK)
    thr = max(1, min(1 << 32, round(density * 2.0**32)))
    return 0 if (h >> 32) >= thr else (1 if h & 1 else -1)


def dense(x):
    return tn.unpack(x) if isinstance(x, tn.PackedTrits) else np.asarray(x)


def as_kind(a, packed):
    return tn.pack(a, "bitplane") if packed else a


def assert_same(x, y):
    assert type(x) is type(y)
    if isinstance(x, tn.PackedTrits):
        assert x.shape == y.shape and x.format == y.format == "bitplane"
        np.testing.assert_array_equal(x.data, y.data)
    else:
        assert x.dtype == y.dtype == np.int8
        np.testing.assert_array_equal(x, y)


@st.composite
def hv_pair(draw, max_d=150, broadcast=True):
    """Two int8 trit arrays of one dimension d whose leading shapes broadcast."""
    d = draw(st.integers(0, max_d))
    lead = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=4))
    if broadcast:
        la = tuple(draw(st.sampled_from([s, 1])) for s in lead)
        lb = tuple(draw(st.sampled_from([s, 1])) for s in lead)
        lb = lb[draw(st.integers(0, len(lb))):]
    else:
        la = lb = lead
    a = draw(trit_arrays((*la, d), dtype=np.int8))
    b = draw(trit_arrays((*lb, d), dtype=np.int8))
    return a, b


# ------------------------------------------------------------------ random
@given(n=st.integers(0, 5), d=st.integers(0, 200), seed=st.integers(-(2**70), 2**70),
       density=st.sampled_from([2 / 3, 1.0, 0.5, 0.01, 1e-12]))
def test_random_matches_python_hash(n, d, seed, density, device):
    v = vsa.random(n, d, seed=seed, density=density, device=device)
    assert v.dtype == np.int8 and v.shape == (n, d)
    expected = [[python_trit(seed, i, j, density) for j in range(d)] for i in range(n)]
    assert v.tolist() == expected
    p = vsa.random(n, d, seed=seed, density=density, format="bitplane", device=device)
    assert_same(p, tn.pack(v, "bitplane"))


def test_random_chunking_and_devices_agree(device):
    big = vsa.random(5, 100, seed=9, device=device)
    np.testing.assert_array_equal(big[:3], vsa.random(3, 100, seed=9, device="numpy"))
    np.testing.assert_array_equal(big[:, :50], vsa.random(5, 50, seed=9, device="cpu"))
    assert_same(vsa.random(7, 1000, seed=9, format="bitplane", device=device),
                vsa.random(7, 1000, seed=9, format="bitplane", device="numpy"))
    assert not (vsa.random(1, 100, seed=9) == vsa.random(1, 100, seed=10)).all()


@pytest.mark.parametrize("density", [2 / 3, 0.1, 1.0])
def test_random_statistics(density):
    v = vsa.random(20, 10_000, density=density, seed=4).astype(np.int64)
    assert abs((v != 0).mean() - density) < 0.01
    assert abs(v[v != 0].mean()) < 0.02
    # rows and columns look independent: small correlations between rows
    c = np.corrcoef(v[:, :])[np.triu_indices(20, 1)]
    assert np.abs(c).max() < 0.06


def test_level_and_circular(device):
    n, d = 9, 20_000
    for make in (vsa.level, vsa.circular):
        v = make(n, d, seed=2, device=device)
        assert v.dtype == np.int8 and v.shape == (n, d)
        assert_same(make(n, d, seed=2, format="bitplane", device=device), tn.pack(v, "bitplane"))
        # row 0 is row 0 of the seed's own level (circular) stream, not random's
        key = vsa.generation.seed_key(2, make.__name__)
        first = vsa.generation.random_rows(0, 1, d, density=2 / 3, key=key, packed=False,
                                           dev="numpy")
        np.testing.assert_array_equal(v[0], first[0])
        assert not np.array_equal(v[0], vsa.random(1, d, seed=2)[0])
        sims = vsa.similarity(v[0], v)
        assert sims[0] == 1.0
    lv = vsa.level(n, d, seed=2, device=device)
    s = vsa.similarity(lv[0], lv)
    assert (np.diff(s) < 0).all() and abs(s[-1]) < 0.05  # falls to unrelated
    cv = vsa.circular(8, d, seed=2, device=device)
    s = vsa.similarity(cv[0], cv)
    assert abs(s[4]) < 0.05 and (np.diff(s[:5]) < 0).all() and (np.diff(s[4:]) > 0).all()
    np.testing.assert_allclose(s[1:4], s[7:4:-1], atol=0.03)  # symmetric around the circle
    for i in range(8):  # depends only on the distance around the circle
        np.testing.assert_allclose(vsa.similarity(cv[i], cv[(i + 2) % 8]), s[2], atol=0.03)


def test_identity():
    for packed in (False, True):
        fmt = "bitplane" if packed else "dense"
        a = as_kind(vsa.random(3, 70, seed=1), packed)
        for rule in ("mul", "mod3"):
            e = vsa.identity(70, rule=rule, format=fmt)
            assert_same(vsa.bind(a, e, rule=rule), a)
    np.testing.assert_array_equal(vsa.identity(3), [1, 1, 1])
    np.testing.assert_array_equal(vsa.identity(3, rule="mod3"), [0, 0, 0])


# (n, d, seed, density) of level and circular, and the sha256 (first 16 hex digits) of the
# dense and bitplane bytes they return. Pinned when level and circular got their own streams
# of a seed (issue 15, item 9: level(n, d, seed=s)[0] was random(1, d, seed=s)[0]); the
# first pins were taken before they went through the "vsa.mixed" kernel. (1, 1, 0) is one
# trit, the same for both by chance; level's (5, 64, 11, 0.01) is all zeros, as before.
MIXED_CASES = [
    (300, 200, 5, 2 / 3), (0, 10, 1, 2 / 3), (1, 1, 0, 2 / 3), (2, 70, 3, 0.5),
    (9, 130, -7, 2 / 3), (16, 1000, 2**65 + 3, 1.0), (5, 64, 11, 0.01),
]
MIXED_DIGESTS = {
    "level": """
        7976a90d42cc6cb7 bbaf70ce4faef521 e3b0c44298fc1c14 e3b0c44298fc1c14 6e340b9cffb37a98
        374708fff7719dd5 fc552e8080d70a5a b464b8485384da6a 73c722bba2ea3001 9b78f6a178a7dd88
        4abb9212f2a5d069 20638ef0e797cb79 7b6436b0c98f6238 5b6fb58e61fa4759
    """.split(),
    "circular": """
        7e1829bfe5d3f2cc ed1e897d69fbb5f4 e3b0c44298fc1c14 e3b0c44298fc1c14 6e340b9cffb37a98
        374708fff7719dd5 591adaf7a0df672d 6d98a540059c36df 1f7d130e68f2357a 9a6de6a197c694f5
        a74398495b668ef0 955ed311396c7f1f e0e784eac67eed5c 04251100e0c34720
    """.split(),
}


def digest(x):
    data = x.data if isinstance(x, tn.PackedTrits) else x
    return hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("kind", ["level", "circular"])
def test_level_and_circular_bit_identical(kind, device):
    make = getattr(vsa, kind)
    digests = iter(MIXED_DIGESTS[kind])
    for n, d, seed, density in MIXED_CASES:
        for fmt in ("dense", "bitplane"):
            v = make(n, d, seed=seed, density=density, format=fmt, device=device)
            assert digest(v) == next(digests), (n, d, seed, density, fmt)  # the old bytes
            assert_same(v, make(n, d, seed=seed, density=density, format=fmt, device="numpy"))


def test_mixed_kernel_matches_the_reference(device):
    from tritnum._dispatch import kernel

    key = vsa.generation.seed_key(3)
    for n, d, circle in [(0, 5, False), (1, 0, True), (7, 130, False), (7, 130, True),
                         (64, 65, True)]:
        got = kernel("vsa.mixed", device)(n, d, key, 2**31, circle)
        want = kernel("vsa.mixed", "numpy")(n, d, key, 2**31, circle)
        assert got.dtype == np.int8 and got.shape == (n, d)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("d", [0, 1, 64, 70])
def test_identity_on_every_device(device, d):
    for rule, value in (("mul", 1), ("mod3", 0)):
        e = vsa.identity(d, rule=rule, device=device)
        assert e.dtype == np.int8
        np.testing.assert_array_equal(e, np.full(d, value, np.int8))
        assert_same(vsa.identity(d, rule=rule, format="bitplane", device=device),
                    tn.pack(np.full(d, value, np.int8), "bitplane", device="numpy"))


def test_public_vsa_code_imports_no_backend():
    root = pathlib.Path(vsa.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                assert not re.match(r"\.+_kernels\.(reference|cpu|cuda)", module), (
                    f"{path.name} imports the backend {module}: call registered ops instead")


# --------------------------------------------------------------- elementwise
def expected_op(a, b, name):
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    v = {"mul": a * b, "mod3": a - b, "unmod3": a + b, "neg": -a}[name]
    return ((v + 1) % 3 - 1 if "mod3" in name else v).astype(np.int8)


@pytest.mark.parametrize("packed", [False, True])
@given(ab=hv_pair())
def test_bind_unbind_negate(ab, packed, device):
    a, b = ab
    A, B = as_kind(a, packed), as_kind(b, packed)
    cases = [
        (vsa.bind(A, B, device=device), "mul"),
        (vsa.bind(A, B, rule="mod3", device=device), "mod3"),
        (vsa.unbind(A, B, device=device), "mul"),
        (vsa.unbind(A, B, rule="mod3", device=device), "unmod3"),
    ]
    for got, name in cases:
        want = expected_op(a, b, name)
        assert got.shape == want.shape
        np.testing.assert_array_equal(dense(got), want)
    assert_same(vsa.bind(A, B, device=device), vsa.bind(A, B, device="numpy"))
    got = vsa.negate(A, device=device)
    np.testing.assert_array_equal(dense(got), -a)


@pytest.mark.parametrize("packed", [False, True])
@given(data=st.data(), d=st.integers(0, 140))
def test_bind_laws(data, d, packed, device):
    a, b, c = (data.draw(trit_arrays((2, d), dtype=np.int8)) for _ in range(3))
    A, B, C = (as_kind(x, packed) for x in (a, b, c))

    def bind(x, y, **kw):
        return vsa.bind(x, y, device=device, **kw)

    assert_same(bind(A, B), bind(B, A))
    assert_same(bind(bind(A, B), C), bind(A, bind(B, C)))
    back = dense(vsa.unbind(bind(A, B), B, device=device))
    np.testing.assert_array_equal(back[b != 0], a[b != 0])
    assert_same(vsa.unbind(bind(A, B, rule="mod3"), B, rule="mod3", device=device), A)
    assert_same(vsa.negate(vsa.negate(A, device=device), device=device), A)


# -------------------------------------------------------------------- bundle
@st.composite
def bundle_case(draw):
    d = draw(st.integers(0, 140))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=20))
    vs = draw(trit_arrays((*shape, d), dtype=np.int8))
    axis = draw(st.integers(-len(shape) - 1, len(shape) - 1).filter(lambda x: x != -1))
    weighted = draw(st.sampled_from([None, "int", "float"]))
    n = (*shape, d)[axis]
    weights = None
    if weighted == "int":
        weights = draw(hnp.arrays(np.int64, n, elements=st.integers(-5, 5)))
    elif weighted == "float":
        weights = draw(hnp.arrays(np.float64, n, elements=st.floats(-3, 3)))
    return vs, axis, weights


@pytest.mark.parametrize("packed", [False, True])
@given(case=bundle_case())
def test_bundle(case, packed, device):
    vs, axis, weights = case
    got = vsa.bundle(as_kind(vs, packed), axis, weights=weights, device=device)
    moved = np.moveaxis(vs, axis, 0).astype(np.float64 if weights is not None and
                                               weights.dtype.kind == "f" else np.int64)
    if weights is None:
        total = moved.sum(axis=0)
    else:
        total = np.zeros(moved.shape[1:], moved.dtype)
        for w, v in zip(weights, moved, strict=True):
            total += w * v
    want = np.sign(total).astype(np.int8)
    assert got.shape == want.shape
    np.testing.assert_array_equal(dense(got), want)
    assert_same(got, vsa.bundle(as_kind(vs, packed), axis, weights=weights, device="numpy"))
    assert_same(got, vsa.bundle(as_kind(vs, packed), np.int64(axis), weights=weights,
                                device=device))


def test_bundle_weights_up_to_the_int64_limit(device):
    v = np.array([[1, -1, 0], [1, 1, -1]], np.int8)
    top = 2**63 - 1
    fits = ([top // 2, top // 2 + 1], np.array([top, 0], np.uint64), [-(top // 2), top // 2 + 1])
    for weights in fits:
        want = np.sign(np.array([int(w) for w in weights]) @ v.astype(object)).astype(np.int8)
        np.testing.assert_array_equal(vsa.bundle(v, weights=weights, device=device), want)
    for weights in ([2**62, 2**62], np.array([2**63, 0], np.uint64), [-(2**63), 0]):
        with pytest.raises(ValueError, match=r"sum\(\|weights\|\) < 2\*\*63"):
            vsa.bundle(v, weights=weights, device=device)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 16, 17, 255, 256, 1000])
def test_bundle_bitplane_counts(n, device):
    """Every path of the bit-sliced counter (8 at a time, the rest, many carries)."""
    vs = vsa.random(n, 300, seed=n)
    if n > 100:  # lopsided columns: long runs of equal votes
        vs[: n // 2, :40] = 1
        vs[n // 2:, 40:80] = -1
    got = vsa.bundle(tn.pack(vs, "bitplane"), device=device)
    np.testing.assert_array_equal(tn.unpack(got), np.sign(vs.sum(axis=0, dtype=np.int64)))


@given(vs=trit_arrays((6, 70), dtype=np.int8), perm=st.permutations(range(6)))
def test_bundle_order_independent_and_ties(vs, perm, device):
    np.testing.assert_array_equal(vsa.bundle(vs, device=device),
                                  vsa.bundle(vs[list(perm)], device=device))
    pair = np.stack([vs[0], -vs[0]])
    np.testing.assert_array_equal(vsa.bundle(pair, device=device), np.zeros(70, np.int8))


# ------------------------------------------------------------------- permute
@pytest.mark.parametrize("packed", [False, True])
@given(v=trit_arrays(hnp.array_shapes(min_dims=1, max_dims=3, max_side=140), dtype=np.int8),
       s=st.integers(-300, 300), per_row=st.booleans())
def test_permute(v, s, per_row, packed, device):
    lead = v.shape[:-1]
    shifts = (np.arange(int(np.prod(lead))).reshape(lead) * 37 - s) if per_row else s
    got = vsa.permute(as_kind(v, packed), shifts, device=device)
    want = np.empty_like(v)
    sh = np.broadcast_to(shifts, lead)
    for idx in np.ndindex(*lead):
        want[idx] = np.roll(v[idx], sh[idx])
    np.testing.assert_array_equal(dense(got), want)
    back = vsa.permute(got, -np.asarray(shifts), device=device)
    assert_same(back, as_kind(v, packed))


@pytest.mark.parametrize("packed", [False, True])
def test_permute_by_shifts_beyond_int64(packed, device):
    v = vsa.random(2, 70, seed=3)
    cases = [2**70, [2**64 + 1, -(2**80)], np.array([2**64 - 1, 2**63], np.uint64)]
    for shifts in cases:
        rolls = [int(s) % 70 for s in np.broadcast_to(np.asarray(shifts, object), 2)]
        got = vsa.permute(as_kind(v, packed), shifts, device=device)
        want = np.stack([np.roll(row, r) for row, r in zip(v, rolls, strict=True)])
        np.testing.assert_array_equal(dense(got), want)
    for shifts in (True, 1.5, [1, "2"], [2**70, 0.5]):
        with pytest.raises(TypeError, match="shifts must be integers"):
            vsa.permute(v, shifts, device=device)


# ---------------------------------------------------------------- similarity
def expected_similarity(a, b, metric):
    a, b = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
    dot = (a * b).sum(axis=-1)
    if metric == "dot":
        return dot
    if metric == "hamming":
        return (a == b).mean(axis=-1) if a.shape[-1] else np.ones(a.shape[:-1])
    norm = np.sqrt(((a != 0).sum(-1) * (b != 0).sum(-1)).astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, dot / np.where(norm > 0, norm, 1), 0.0)


@pytest.mark.parametrize("packed", [False, True])
@given(ab=hv_pair(), metric=st.sampled_from(["dot", "cosine", "hamming"]))
def test_similarity(ab, metric, packed, device):
    a, b = ab
    got = vsa.similarity(as_kind(a, packed), as_kind(b, packed), metric, device=device)
    want = expected_similarity(a, b, metric)
    assert np.shape(got) == want.shape
    assert np.asarray(got).dtype == (np.int64 if metric == "dot" else np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
    ref = vsa.similarity(a, b, metric, device="numpy")
    np.testing.assert_array_equal(got, ref)  # every backend and kind: bit-identical
    np.testing.assert_array_equal(got, vsa.similarity(b, a, metric, device=device))  # symmetric
    if metric == "cosine":
        assert (np.abs(got) <= 1).all()
    if metric == "hamming":
        assert ((0 <= got) & (got <= 1)).all()


def test_similarity_all_pairs_and_scalars():
    a, b = vsa.random(3, 500, seed=1), vsa.random(4, 500, seed=2)
    s = vsa.similarity(a[:, None], b[None])
    assert s.shape == (3, 4)
    np.testing.assert_array_equal(s[1, 2], vsa.similarity(a[1], b[2]))
    assert isinstance(vsa.similarity(a[0], a[0]), np.float64)
    assert vsa.similarity(a[0], a[0]) == 1.0
    assert vsa.similarity(np.zeros(5, np.int8), a[0, :5]) == 0.0


# -------------------------------------------------------------------- search
def brute_search(q, mem, k, metric):
    s = expected_similarity(np.asarray(q)[..., None, :], mem, metric)
    order = np.argsort(-s, axis=-1, kind="stable")[..., :k]
    return order, np.take_along_axis(s, order, -1)


@pytest.mark.parametrize("packed", [False, True])
@given(data=st.data(), metric=st.sampled_from(["dot", "cosine", "hamming"]))
def test_search(data, metric, packed, device):
    d = data.draw(st.integers(0, 100))
    m = data.draw(st.integers(1, 30))
    mem = data.draw(trit_arrays((m, d), dtype=np.int8))
    if m > 3 and data.draw(st.booleans()):  # duplicates: ties to the lower index
        mem[m // 2:] = mem[: m - m // 2]
    q = data.draw(trit_arrays(data.draw(st.sampled_from([(d,), (3, d), (2, 2, d)])),
                              dtype=np.int8))
    k = data.draw(st.integers(1, m))
    idx, scores = vsa.search(as_kind(q, packed), as_kind(mem, packed), k, metric, device=device)
    want_idx, want_scores = brute_search(q, mem, k, metric)
    assert idx.shape == scores.shape == (*q.shape[:-1], k)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-15)


def test_search_finds_noisy_items():
    mem = vsa.random(200, 2000, seed=5, format="bitplane")
    clean = tn.unpack(mem)[[3, 150, 199]]
    noisy = clean.copy()
    noisy[:, :600] = vsa.random(3, 600, seed=6)
    for q, m in ((noisy, tn.unpack(mem)), (tn.pack(noisy, "bitplane"), mem)):
        idx, _ = vsa.search(q, m, k=1)
        np.testing.assert_array_equal(idx[:, 0], [3, 150, 199])


# ---------------------------------------------------------- inputs and errors
def test_noncontiguous_readonly_and_other_dtypes(device):
    a = vsa.random(6, 200, seed=1)
    b = vsa.random(6, 200, seed=2)
    view = a[::2, ::2]
    ro = b[::2, ::2].copy()
    ro.setflags(write=False)
    np.testing.assert_array_equal(vsa.bind(view, ro, device=device), view * ro)
    np.testing.assert_array_equal(vsa.bind(view.astype(np.int64), ro.astype(np.uint8) * 0,
                                           device=device), np.zeros_like(view))
    np.testing.assert_array_equal(vsa.bundle(view, device=device),
                                  np.sign(view.sum(0)).astype(np.int8))


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
def test_bind_checks_values_as_it_reads_them(dtype, device):
    """int8 values are checked inside the elementwise kernel; each operand and row is named."""
    a = vsa.random(5, 300, seed=1).astype(dtype)
    for name, where in (("a", (4, 299)), ("b", (0, 0)), ("b", (2, 150))):
        x, y = a.copy(), a[::-1].copy()
        (x if name == "a" else y)[where] = -2
        for op in (vsa.bind, vsa.unbind, lambda p, q, device: vsa.bind(p, q, rule="mod3",
                                                                        device=device)):
            with pytest.raises(tn.InvalidTritsError, match=rf"{name}\[{where[0]}, {where[1]}\]"):
                op(x, y, device=device)
    bad = np.full((1, 300), 5, dtype)
    with pytest.raises(tn.InvalidTritsError, match=r"b\[0, 0\] = 5"):  # nothing is bound
        vsa.bind(a[:0], bad, device=device)


def test_bad_inputs():
    a = vsa.random(2, 10)
    with pytest.raises(tn.ShapeMismatchError) as err:
        vsa.bind(a, vsa.random(2, 11))
    assert (err.value.expected, err.value.actual) == (10, 11)
    with pytest.raises(tn.ShapeMismatchError, match="do not broadcast"):
        vsa.similarity(vsa.random(2, 10), vsa.random(3, 10))
    with pytest.raises(tn.ShapeMismatchError):
        vsa.search(a[0], vsa.random(4, 9))
    bad = a.copy()
    bad[1, 3] = 2
    for call in (lambda: vsa.bind(a, bad), lambda: vsa.bundle(bad), lambda: vsa.permute(bad),
                 lambda: vsa.similarity(bad, a), lambda: vsa.search(a, bad)):
        with pytest.raises(tn.InvalidTritsError, match=r"\[1, 3\] = 2 is not a trit"):
            call()
    with pytest.raises(tn.InvalidTritsError, match=r"\[0\] = 300"):
        vsa.negate(np.array([300, 0], np.int64))
    with pytest.raises(TypeError, match="integer"):
        vsa.bind(a.astype(np.float32), a)
    with pytest.raises(ValueError, match=r"k=5 is larger than the memory \(2"):
        vsa.search(a[0], a, k=5)
    with pytest.raises(ValueError, match="k must be >= 1"):
        vsa.search(a[0], a, k=0)
    with pytest.raises(ValueError, match="memory is empty"):
        vsa.search(a[0], a[:0])
    for density in (0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"density must be in \(0, 1\]"):
            vsa.random(2, 10, density=density)
    with pytest.raises(TypeError, match="density"):
        vsa.random(2, 10, density="dense")
    with pytest.raises(ValueError, match="n must be >= 0"):
        vsa.random(-1, 10)
    with pytest.raises(TypeError, match="seed must be an integer"):
        vsa.random(1, 10, seed=1.5)
    with pytest.raises(tn.FormatError, match="format must be one of 'dense', 'bitplane'"):
        vsa.random(1, 10, format="2bit")
    with pytest.raises(tn.FormatError, match="to\\('bitplane'\\)"):
        vsa.bind(tn.pack(a, "2bit"), tn.pack(a, "2bit"))
    with pytest.raises(TypeError, match="both"):
        vsa.bind(a, tn.pack(a, "bitplane"))
    with pytest.raises(ValueError, match="rule"):
        vsa.bind(a, a, rule="xor")
    with pytest.raises(ValueError, match="metric"):
        vsa.similarity(a, a, "euclid")
    with pytest.raises(ValueError, match="trit axis"):
        vsa.bundle(a, axis=-1)
    with pytest.raises(ValueError, match="axis must be >= -2, got -3"):
        vsa.bundle(a, axis=np.int8(-3))
    with pytest.raises(tn.ShapeMismatchError, match="rank >= 2"):
        vsa.bundle(a[0])
    with pytest.raises(tn.ShapeMismatchError, match=r"weights must have shape \(2,\)"):
        vsa.bundle(a, weights=[1, 2, 3])
    with pytest.raises(ValueError, match="finite"):
        vsa.bundle(a, weights=[1, np.nan])
    with pytest.raises(TypeError, match="shifts"):
        vsa.permute(a, 1.5)
    with pytest.raises(tn.ShapeMismatchError, match="shifts"):
        vsa.permute(a, [1, 2, 3])
    corrupt = tn.pack(a, "bitplane").data.copy()
    corrupt[0, :, 0] = 1  # plus and minus bit both set
    with pytest.raises(tn.InvalidTritsError, match="both"):
        vsa.negate(tn.PackedTrits(corrupt, (2, 10), "bitplane"))
