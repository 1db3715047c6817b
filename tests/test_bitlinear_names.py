"""The two BitLinear layers of one name: NumPy's takes a weight matrix, PyTorch's takes sizes.

Each says so in its docstring, naming the other, and each explains a call meant for the other.
"""

import copy
import inspect

import numpy as np
import pytest

import tritnum as tn


def test_numpy_layer_names_the_torch_one():
    assert ":class:`tritnum.torch.BitLinear`" in tn.BitLinear.__doc__
    assert "weight matrix" in tn.BitLinear.__doc__.split("Parameters")[0]
    for sizes in [(64, 32), (64,), (np.int64(64), 32)]:
        with pytest.raises(TypeError, match=r"not sizes.*tritnum\.torch\.BitLinear\(in_features"):
            tn.BitLinear(*sizes)
    layer = tn.BitLinear(np.ones((4, 8)))  # a matrix still builds the layer
    assert (layer.out_features, layer.in_features) == (4, 8)


def test_torch_layer_names_the_numpy_one():
    torch = pytest.importorskip("torch", reason="the test extra installs torch")
    from tritnum.torch import BitLinear

    assert ":class:`tritnum.BitLinear`" in BitLinear.__doc__
    assert "takes sizes" in BitLinear.__doc__.split("Parameters")[0]
    w = torch.randn(32, 64)
    for args, kwargs in [((w,), {}), ((w.numpy(),), {}), ((w, None), {}), ((), {"in_features": w}),
                         (([[1.0, 2.0]],), {})]:
        with pytest.raises(TypeError, match=r"takes sizes.*tritnum\.BitLinear\(W\)"):
            BitLinear(*args, **kwargs)
    # what the check before __init__ must not change: the signature, copies, sizes
    assert list(inspect.signature(BitLinear).parameters)[:3] == [
        "in_features", "out_features", "bias"]
    layer = BitLinear(64, 32, bias=False)
    clone = copy.deepcopy(layer)
    assert clone.weight.shape == (32, 64) and torch.equal(clone.weight, layer.weight)
    assert BitLinear(torch.tensor(8), 4).in_features == 8  # a 0-d integer tensor is a size
