"""ItemMemory, sequences, n-grams, hash tables, Centroid, and the digits task."""

import json

import numpy as np
import pytest

import tritnum as tn
from tritnum import vsa

FORMATS = ["dense", "bitplane"]


def dense(x):
    return tn.unpack(x) if isinstance(x, tn.PackedTrits) else np.asarray(x)


@pytest.mark.parametrize("fmt", FORMATS)
def test_item_memory(fmt, tmp_path):
    mem = vsa.ItemMemory(500, seed=4, format=fmt)
    vecs = [mem.add(s) for s in ("a", "b", np.int64(3), "d")]
    assert len(mem) == 4 and mem.symbols == ["a", "b", 3, "d"]
    # symbol i is row i of the seed's ItemMemory stream (not random's: issue 15, item 9)
    key = vsa.generation.seed_key(4, "ItemMemory")
    rows = vsa.generation.random_rows(0, 4, 500, density=2 / 3, key=key, packed=False,
                                      dev="numpy")
    np.testing.assert_array_equal(dense(mem.vectors), rows)
    assert not np.array_equal(dense(mem.vectors), vsa.random(4, 500, seed=4))
    np.testing.assert_array_equal(dense(mem["b"]), dense(vecs[1]))
    np.testing.assert_array_equal(dense(mem.add("a")), dense(vecs[0]))  # no second copy
    assert len(mem) == 4
    given = vsa.random(1, 500, seed=99)[0]
    mem.add("given", given)
    np.testing.assert_array_equal(dense(mem["given"]), given)
    noisy = dense(mem[3]).copy()
    noisy[:200] = vsa.random(1, 200, seed=5)[0]
    assert mem.cleanup(noisy) == 3
    assert mem.cleanup(tn.pack(noisy, "bitplane")) == 3
    assert mem.cleanup(noisy, k=2)[0] == 3
    batch = np.stack([dense(mem["a"]), noisy])
    assert mem.cleanup(batch) == ["a", 3]
    assert mem.cleanup(batch[None]) == [["a", 3]]
    path = tmp_path / "mem.npz"
    mem.save(path)
    back = vsa.ItemMemory.load(path)
    assert back.symbols == mem.symbols and back.format == fmt
    np.testing.assert_array_equal(dense(back.vectors), dense(mem.vectors))
    back.add("e")
    mem.add("e")
    np.testing.assert_array_equal(dense(back["e"]), dense(mem["e"]))


def test_item_memory_errors(tmp_path):
    mem = vsa.ItemMemory(64)
    with pytest.raises(ValueError, match="memory is empty"):
        mem.cleanup(np.zeros(64, np.int8))
    mem.add("x")
    with pytest.raises(KeyError, match="'y' is not in this ItemMemory"):
        mem["y"]
    with pytest.raises(ValueError, match="larger than the memory"):
        mem.cleanup(mem["x"], k=2)
    with pytest.raises(tn.ShapeMismatchError):
        mem.cleanup(np.zeros(63, np.int8))
    with pytest.raises(tn.ShapeMismatchError):
        mem.add("z", np.zeros(65, np.int8))
    with pytest.raises(tn.InvalidTritsError):
        mem.add("z", np.full(64, 5))
    with pytest.raises(tn.FormatError, match=r"ItemMemory\.save writes npz files, not safetensors"):
        mem.save(tmp_path / "m.safetensors")  # the name would say another format
    assert not (tmp_path / "m.safetensors").exists()
    mem.add(("tuple",))
    with pytest.raises(TypeError, match="str or int"):
        mem.save(tmp_path / "m.npz")
    with pytest.raises(ValueError, match="density"):
        vsa.ItemMemory(10, density=0)
    bad = tmp_path / "bad.npz"
    np.savez(bad, rows=np.zeros(3))
    with pytest.raises(tn.FormatError, match="not a readable ItemMemory file"):
        vsa.ItemMemory.load(bad)


@pytest.mark.parametrize("fmt", FORMATS)
def test_item_memory_load_refuses_corrupt_files(fmt, tmp_path):
    mem = vsa.ItemMemory(70, format=fmt)
    mem.add("a")
    mem.add("b")
    path = tmp_path / "m.npz"
    mem.save(path)
    with np.load(path) as f:
        meta, rows = f["meta"], f["rows"]
    bad_rows = []
    for i in range(3 if fmt == "bitplane" else 2):
        r = rows.copy()
        if fmt == "dense":
            r[1, 5] = (-128, 2)[i]  # |-128| is -128 in int8
        elif i < 2:
            r[1, :, i] |= np.uint64(1)  # a trit both +1 and -1
        else:
            r[1, 0, 1] |= np.uint64(1 << 63)  # a padding bit past d = 70
        bad_rows.append(r)
    for r in bad_rows:
        np.savez(path, meta=meta, rows=r)
        where = r"rows\[1, 5\]" if fmt == "dense" else ""  # dense: the first bad value named
        with pytest.raises(tn.FormatError, match="the stored vectors are not trits.*" + where):
            vsa.ItemMemory.load(path)
    header = json.loads(meta.tobytes().decode())
    for key, value in [("d", "seventy"), ("format", "2bit"), ("symbols", 5), ("seed", None)]:
        np.savez(path, meta=np.frombuffer(json.dumps({**header, key: value}).encode(), np.uint8),
                 rows=rows)
        with pytest.raises(tn.FormatError):
            vsa.ItemMemory.load(path)
    np.savez(path, meta=meta, rows=rows)
    path.write_bytes(path.read_bytes()[:-40])  # truncated
    with pytest.raises(tn.FormatError, match="not a readable ItemMemory file"):
        vsa.ItemMemory.load(path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_bundle_sequence_and_ngrams(fmt):
    d = 300
    vs = vsa.random(5, d, seed=1, format=fmt)
    x = dense(vs)
    seq = vsa.bundle_sequence(vs)
    want = np.sign(sum(np.roll(x[i], 4 - i).astype(int) for i in range(5))).astype(np.int8)
    np.testing.assert_array_equal(dense(seq), want)
    grams = vsa.ngrams(vs, 3)
    windows = [np.roll(x[w], 2) * np.roll(x[w + 1], 1) * x[w + 2] for w in range(3)]
    np.testing.assert_array_equal(dense(grams), np.sign(sum(windows)).astype(np.int8))
    np.testing.assert_array_equal(dense(vsa.ngrams(vs, 1)), dense(vsa.bundle(vs)))
    # batched: (2, 5, d) sequences
    both = np.stack([x, x[::-1]])
    np.testing.assert_array_equal(vsa.bundle_sequence(both)[0], dense(seq))
    np.testing.assert_array_equal(vsa.ngrams(both, 3)[0], dense(grams))
    with pytest.raises(ValueError, match="no window of 6"):
        vsa.ngrams(vs, 6)
    with pytest.raises(tn.ShapeMismatchError):
        vsa.bundle_sequence(x[0])



@pytest.mark.parametrize("n", [1, 2, 3])
def test_ngrams_check_the_codes_of_unchecked_packed_input(n):
    """Windows of a PackedTrits wrapped without a check (copy=False) are read as checked
    as it is: a corrupt code raises, as it does in bundle_sequence (a silent result before)."""
    data = tn.pack(vsa.random(4, 64, seed=2), "bitplane").data.copy()
    data[1, :, 0] = 1  # plus and minus bit 0 both set in vector 1: a corrupt code
    bad = tn.PackedTrits(data, (4, 64), "bitplane", copy=False)
    with pytest.raises(tn.InvalidTritsError, match="corrupt 'bitplane'"):
        vsa.ngrams(bad, n)
    with pytest.raises(tn.InvalidTritsError, match="corrupt 'bitplane'"):
        vsa.bundle_sequence(bad)

def test_sequence_order_matters():
    letters = vsa.random(26, 10_000, seed=2)
    abc = vsa.bundle_sequence(letters[[0, 1, 2]])
    cba = vsa.bundle_sequence(letters[[2, 1, 0]])
    assert abs(vsa.similarity(abc, cba)) < 0.4
    assert vsa.similarity(abc, vsa.permute(letters[0], 2)) > 0.3


@pytest.mark.parametrize("fmt", FORMATS)
def test_hash_table_lookup(fmt):
    mem = vsa.ItemMemory(10_000, seed=8, format=fmt)
    pairs = {"name": "alice", "city": "paris", "job": "pilot", "pet": "cat", "car": "van"}
    keys = [mem.add(k) for k in pairs]
    vals = [mem.add(v) for v in pairs.values()]
    stack = np.stack if fmt == "dense" else (lambda xs: tn.pack(np.stack([dense(x) for x in xs]),
                                                              "bitplane"))
    record = vsa.hash_table(stack(keys), stack(vals))
    want = np.sign(sum(dense(k).astype(int) * dense(v) for k, v in zip(keys, vals, strict=True)))
    np.testing.assert_array_equal(dense(record), want)
    for k, v in pairs.items():
        assert mem.cleanup(vsa.unbind(record, mem[k])) == v


def test_centroid():
    protos = vsa.random(4, 3000, seed=1)
    y = np.repeat(np.array(["w", "x", "y", "z"]), 25)
    noise = vsa.random(100, 3000, seed=2)
    X = vsa.bundle(np.stack([protos[np.searchsorted(["w", "x", "y", "z"], y)], noise,
                             protos[np.searchsorted(["w", "x", "y", "z"], y)]]))
    clf = vsa.Centroid().fit(tn.pack(X, "bitplane"), y)
    assert list(clf.classes_) == ["w", "x", "y", "z"]
    np.testing.assert_array_equal(clf.sums_[1], X[y == "x"].sum(0))
    assert list(clf.predict(protos)) == ["w", "x", "y", "z"]
    assert clf.score(X, y) == 1.0
    # partial_fit in two halves gives the same prototypes
    part = vsa.Centroid().partial_fit(X[::2], y[::2]).partial_fit(X[1::2], y[1::2])
    np.testing.assert_array_equal(part.sums_, clf.sums_)
    with pytest.raises(ValueError, match="call fit"):
        vsa.Centroid().predict(X)
    with pytest.raises(tn.ShapeMismatchError):
        clf.predict(X[:, :10])
    with pytest.raises(tn.ShapeMismatchError):
        vsa.Centroid().fit(X, y[:3])


@pytest.mark.parametrize(("n", "d", "classes"), [(0, 5, 2), (1, 1, 1), (37, 2500, 5), (9, 70, 12)])
def test_class_sums_on_every_device(n, d, classes, device):
    """One pass over the rows: each class's sum, exactly (empty classes stay 0)."""
    from tritnum._dispatch import call
    from tritnum._interop import to_host

    rows = vsa.random(n, d, seed=n + d)
    labels = np.random.default_rng(d).integers(0, classes, n).astype(np.int64)
    got = to_host(call("vsa.class_sums", device, rows, labels, classes))
    want = np.stack([rows[labels == c].astype(np.int64).sum(0) for c in range(classes)])
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_centroid_retraining_matches_the_perceptron_rule(device):
    """``epochs`` rounds: misclassified samples move from the guessed class to their own."""
    X = vsa.random(200, 100, seed=4, density=0.4)  # 65 of 200 misclassified at first
    y = np.arange(200) % 4
    sums = np.stack([X[y == c].sum(0) for c in range(4)]).astype(np.float64)
    for _ in range(3):
        guess = np.argmax((X @ sums.T) / np.linalg.norm(sums, axis=1), axis=1)
        wrong = guess != y
        if not wrong.any():
            break
        for i in np.flatnonzero(wrong):
            sums[y[i]] += X[i]
            sums[guess[i]] -= X[i]
    clf = vsa.Centroid(epochs=3, device=device).fit(X, y)
    np.testing.assert_array_equal(clf.sums_, sums)


def test_centroid_and_item_memory_on_every_device(device, tmp_path):
    """Centroid and ItemMemory check, unpack and search on the device they are given."""
    X = vsa.random(12, 130, seed=1)
    y = np.arange(12) % 3
    want = vsa.Centroid(epochs=2).fit(X, y)
    for data in (X, tn.pack(X, "bitplane")):
        clf = vsa.Centroid(epochs=2, device=device).fit(data, y)
        np.testing.assert_array_equal(clf.sums_, want.sums_)
        np.testing.assert_array_equal(clf.decision_function(data), want.decision_function(X))
    for fmt in FORMATS:
        mem = vsa.ItemMemory(130, seed=2, format=fmt, device=device)
        mem.add("a")
        mem.add("b", vsa.random(1, 130, seed=3)[0])
        mem.save(tmp_path / "m.npz")
        back = vsa.ItemMemory.load(tmp_path / "m.npz", device=device)
        assert back.device == device
        np.testing.assert_array_equal(dense(back.vectors), dense(mem.vectors))
        assert back.cleanup(dense(mem["b"])) == "b"
        with np.load(tmp_path / "m.npz") as f:
            meta, rows = f["meta"], f["rows"].copy()
        if fmt == "dense":
            rows[1, 0] = 2
        else:
            rows[1, :, 0] |= np.uint64(1)  # trit 0 both +1 and -1
        np.savez(tmp_path / "m.npz", meta=meta, rows=rows)
        with pytest.raises(tn.FormatError, match="not trits"):
            vsa.ItemMemory.load(tmp_path / "m.npz", device=device)


def encode_digits(images, d, seed=0):
    """Level-encoded pixels (17 intensities) bound to position vectors, bundled per image."""
    levels = vsa.level(17, d, seed=seed, density=1.0, format="bitplane")
    positions = vsa.random(64, d, seed=seed + 1, format="bitplane")
    lv = tn.unpack(levels)
    out = []
    for i in range(0, len(images), 64):
        pixels = tn.pack(lv[images[i:i + 64].astype(int)], "bitplane")  # (b, 64, d)
        bound = vsa.bind(positions, pixels)
        out.append(tn.unpack(vsa.bundle(bound, axis=1)))
    return np.concatenate(out)


def test_digits_classification():
    pytest.importorskip("sklearn", reason="the test extra installs scikit-learn")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    d = 10_000
    Htr, Hte = encode_digits(Xtr, d), encode_digits(Xte, d)
    assert Htr.shape == (len(Xtr), d) and Htr.dtype == np.int8
    plain = vsa.Centroid().fit(Htr, ytr).score(Hte, yte)
    retrained = vsa.Centroid(epochs=3).fit(Htr, ytr).score(Hte, yte)
    assert plain >= 0.88, plain
    assert retrained >= 0.90, retrained
