"""Arguments every op takes or refuses with a typed error (issue 15, item 7)."""

import numpy as np
import pytest

import tritnum as tn

SEQ = [[1, 0, -1, 1], [0, 1, 1, -1], [1, 1, 1, 1]]


@pytest.mark.parametrize("op", [tn.vsa.bundle_sequence, lambda v: tn.vsa.ngrams(v, 2),
                                lambda v: tn.vsa.hash_table(v, v)],
                         ids=["bundle_sequence", "ngrams", "hash_table"])
def test_sequences_take_nested_lists(op):
    np.testing.assert_array_equal(op(SEQ), op(np.array(SEQ, np.int8)))


def test_x_scale_is_checked_when_there_is_no_output():
    for w, x in ((tn.quantize(np.ones((0, 4))), np.ones((2, 4), np.int8)),
                 (tn.quantize(np.ones((3, 4))), np.zeros((0, 4), np.int8))):
        with pytest.raises(tn.ShapeMismatchError, match="x_scale"):
            tn.linear(x, w, x_scale=np.ones(5))
        with pytest.raises(TypeError, match="x_scale"):
            tn.linear(x, w, x_scale="a")


@pytest.mark.parametrize("tensors", [
    [np.ones(4, np.float32)],
    {"a": np.ones(4, bool)},
    {"a": np.ones(4, np.uint8)},
    {"a": np.ones(4, complex)},
    {"a": [1.0, 2.0]},
    {7: np.ones(4, np.float32)},
], ids=["list", "bool", "uint8", "complex", "list value", "int name"])
def test_write_gguf_refuses_what_gguf_cannot_hold(tensors, tmp_path):
    pytest.importorskip("gguf")
    path = tmp_path / "x.gguf"
    with pytest.raises(TypeError, match="write_gguf"):
        tn.io.write_gguf(path, tensors)
    assert not path.exists()  # refused before anything is written


def test_write_gguf_takes_big_endian_arrays(tmp_path):
    pytest.importorskip("gguf")
    values = np.arange(8, dtype=">f4")
    tn.io.write_gguf(tmp_path / "x.gguf", {"a": values})
    np.testing.assert_array_equal(tn.io.read_gguf(tmp_path / "x.gguf")["a"], values)


def test_centroid_refuses_mixed_label_kinds():
    X = tn.vsa.random(4, 64, seed=1)
    clf = tn.vsa.Centroid().fit(X, [1, 2, 1, 2])
    with pytest.raises(TypeError, match="do not mix"):
        clf.partial_fit(X, ["a", "b", "a", "b"])
    np.testing.assert_array_equal(clf.classes_, [1, 2])  # nothing was changed
    with pytest.raises(TypeError, match="numbers or strings"):
        tn.vsa.Centroid().fit(X, np.array([None] * 4))


def test_reprs_say_what_they_hold():
    mem = tn.vsa.ItemMemory(100, format="bitplane")
    mem.add("a")
    assert repr(mem) == "ItemMemory(d=100, format='bitplane', 1 symbols, device='auto')"
    clf = tn.vsa.Centroid(epochs=2).fit(tn.vsa.random(4, 64, seed=1), [0, 1, 0, 1])
    assert repr(clf) == "Centroid(epochs=2, device='auto', classes=2)"


def test_item_memory_files_with_a_symbol_twice_are_refused(tmp_path):
    import json

    mem = tn.vsa.ItemMemory(64, seed=1)
    mem.add("a")
    mem.add("b")
    path = tmp_path / "mem.npz"
    mem.save(path)
    with np.load(path) as f:
        meta, rows = json.loads(f["meta"].tobytes()), f["rows"]
    meta["symbols"] = ["a", "a"]  # a file another program wrote, or edited by hand
    np.savez(path, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), rows=rows)
    with pytest.raises(tn.FormatError, match="'a' twice"):
        tn.vsa.ItemMemory.load(path)
