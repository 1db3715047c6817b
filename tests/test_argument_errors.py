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
