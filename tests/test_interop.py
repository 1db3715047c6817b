"""PyTorch tensors through every public op: torch in, torch out, equal to the NumPy results.

Zero-copy is checked where it is promised: a contiguous tensor of a supported dtype
reaches the kernel as a NumPy view of the tensor's own memory (``data_ptr``), and a
result is handed back as a tensor over the kernel's output buffer.
"""

import numpy as np
import pytest

import tritnum as tn
import tritnum._dispatch as dispatch
from tritnum._interop import Origin, native, origin

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(14)
FORMATS = tn.FORMATS


def trits(shape, seed=0):
    return np.random.default_rng(seed).integers(-1, 2, shape).astype(np.int8)


def floats(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def same(got, want):
    """``got`` is a CPU torch tensor equal to the NumPy ``want`` (dtype and values)."""
    assert isinstance(got, torch.Tensor), type(got)
    assert got.device.type == "cpu"
    g = got.numpy()
    w = np.asarray(want)
    assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
    np.testing.assert_array_equal(g, w)


@pytest.fixture
def kernel_inputs(monkeypatch):
    """The first argument of every kernel called, by op name (for zero-copy checks)."""
    seen = {}
    real = dispatch.kernel

    def spy(op, device):
        fn = real(op, device)

        def recording(*args, **kwargs):
            seen.setdefault(op, args[0])
            return fn(*args, **kwargs)

        return recording

    monkeypatch.setattr(dispatch, "kernel", spy)
    return seen


# ------------------------------------------------------------------ the boundary itself
def test_native_shares_the_tensors_memory():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    a = native(t)
    assert isinstance(a, np.ndarray) and a.ctypes.data == t.data_ptr()
    strided = native(t.T)  # non-contiguous: still a view, with the tensor's strides
    assert strided.ctypes.data == t.data_ptr() and not strided.flags.c_contiguous
    np.testing.assert_array_equal(strided, t.T.numpy())


def test_wrap_hands_back_the_kernels_buffer():
    out = np.arange(6, dtype=np.int8)
    t = Origin("torch", False, torch.device("cpu")).wrap(out)
    assert t.data_ptr() == out.ctypes.data
    assert origin(torch.zeros(1)).framework == "torch"
    assert origin(np.zeros(1)) == Origin()


def test_requires_grad_is_read_detached():
    w = torch.nn.Parameter(torch.from_numpy(floats((8, 32))))
    q = tn.quantize(w, axis=-1)
    np.testing.assert_array_equal(q.packed.data, tn.quantize(floats((8, 32)), axis=-1).packed.data)
    y = tn.linear(w, q)
    assert not y.requires_grad and y.grad_fn is None


def test_bfloat16_is_read_as_float32():
    w = torch.from_numpy(floats((4, 64))).to(torch.bfloat16)
    want = tn.quantize(w.float().numpy(), axis=-1)
    got = tn.quantize(w, axis=-1)
    np.testing.assert_array_equal(got.packed.data, want.packed.data)
    np.testing.assert_array_equal(got.scales, want.scales)
    x = torch.from_numpy(floats((3, 64), seed=1)).to(torch.bfloat16)
    same(tn.linear(x, got), tn.linear(x.float().numpy(), want))
    q, s = tn.quantize_activations(x)
    wq, ws = tn.quantize_activations(x.float().numpy())
    same(q, wq)
    same(s, ws)


def test_tensors_on_other_devices_are_refused():
    with pytest.raises(TypeError, match="CPU and CUDA tensors"):
        tn.pack(torch.zeros(4, dtype=torch.int8, device="meta"))


# ------------------------------------------------------------------ packing
@pytest.mark.parametrize("fmt", FORMATS)
def test_pack_unpack(fmt, kernel_inputs):
    a = trits((3, 5, 70))
    t = torch.from_numpy(a.copy())
    p = tn.pack(t, fmt)
    assert kernel_inputs["pack"].ctypes.data == t.data_ptr()  # read in place
    assert p == tn.pack(a, fmt)
    same(tn.unpack(p), a)
    same(p.to("bitplane" if fmt != "bitplane" else "2bit").unpack(), a)
    same(p[1].unpack(), a[1])
    same(tn.unpack(tn.pack(t.transpose(0, 1), fmt)), a.transpose(1, 0, 2))


def test_packed_bytes_from_a_tensor():
    p = tn.pack(trits((2, 9)), "base3")
    wrapped = tn.PackedTrits(torch.from_numpy(p.data.copy()), (2, 9), "base3")
    same(wrapped.unpack(), trits((2, 9)))


# ------------------------------------------------------------------ quantize and matmul
@pytest.mark.parametrize("group_size", [None, 32])
def test_quantize_dequantize(group_size):
    w = floats((6, 64))
    got = tn.quantize(torch.from_numpy(w), group_size=group_size)
    want = tn.quantize(w, group_size=group_size)
    np.testing.assert_array_equal(got.packed.data, want.packed.data)
    np.testing.assert_array_equal(got.scales, want.scales)
    same(tn.dequantize(got), tn.dequantize(want))
    same(got[2:4].dequantize(), tn.dequantize(want)[2:4])


def test_quantize_activations():
    x = floats((2, 3, 40))
    got = tn.quantize_activations(torch.from_numpy(x))
    want = tn.quantize_activations(x)
    for g, w in zip(got, want, strict=True):
        same(g, w)


@pytest.mark.parametrize("activations", ["float", "int8"])
def test_linear(activations, kernel_inputs):
    w = tn.quantize(floats((24, 64), seed=3), axis=-1)
    x = floats((5, 64), seed=4)
    bias = floats((24,), seed=5)
    t = torch.from_numpy(x)
    got = tn.linear(t, w, torch.from_numpy(bias), activations=activations)
    same(got, tn.linear(x, w, bias, activations=activations))
    if activations == "float":
        assert kernel_inputs["linear_float"].ctypes.data == t.data_ptr()
        same(t @ w.T, x @ w.T)


def test_bitlinear():
    layer = tn.BitLinear(floats((16, 32)), bias=np.zeros(16, np.float32))
    x = floats((3, 32), seed=1)
    same(layer(torch.from_numpy(x)), layer(x))


# ------------------------------------------------------------------ VSA
def _vsa_cases():
    a, b = trits((4, 100), 1), trits((4, 100), 2)
    return {
        "bind": lambda m: tn.vsa.bind(m(a), m(b)),
        "unbind mod3": lambda m: tn.vsa.unbind(m(a), m(b), rule="mod3"),
        "negate": lambda m: tn.vsa.negate(m(a)),
        "bundle": lambda m: tn.vsa.bundle(m(a)),
        "bundle weighted": lambda m: tn.vsa.bundle(m(a), weights=m(np.arange(1, 5))),
        "permute": lambda m: tn.vsa.permute(m(a), 3),
        "similarity": lambda m: tn.vsa.similarity(m(a), m(b)),
        "similarity dot": lambda m: tn.vsa.similarity(m(a), m(b), "dot"),
        "similarity one pair": lambda m: tn.vsa.similarity(m(a[0]), m(b[0]), "hamming"),
        "search": lambda m: tn.vsa.search(m(a[:2]), m(b), k=2),
        "bundle_sequence": lambda m: tn.vsa.bundle_sequence(m(a)),
        "ngrams": lambda m: tn.vsa.ngrams(m(a), 2),
        "hash_table": lambda m: tn.vsa.hash_table(m(a), m(b)),
    }


@pytest.mark.parametrize("name", list(_vsa_cases()))
def test_vsa(name):
    case = _vsa_cases()[name]
    got = case(lambda v: torch.from_numpy(np.ascontiguousarray(v)))
    want = case(lambda v: v)
    for g, w in zip(got, want, strict=True) if isinstance(want, tuple) else [(got, want)]:
        same(g, w)


def test_vsa_bitplanes_from_tensors():
    a = tn.pack(torch.from_numpy(trits((3, 130), 1)), "bitplane")
    b = tn.pack(trits((3, 130), 2), "bitplane")
    got = tn.vsa.bind(a, b)
    assert isinstance(got, tn.PackedTrits)
    same(got.unpack(), tn.vsa.bind(trits((3, 130), 1), trits((3, 130), 2)))


# ------------------------------------------------------------------ GGUF codecs
@pytest.mark.parametrize("qtype", ["TQ2_0", "TQ1_0", "I2_S"])
def test_gguf_codecs(qtype):
    x = floats((2, 256), seed=6)
    blocks = tn.io.to_gguf_blocks(torch.from_numpy(x), qtype)
    same(blocks, tn.io.to_gguf_blocks(x, qtype))
    values = tn.io.from_gguf_blocks(blocks, qtype, (2, 256))
    same(values, tn.io.from_gguf_blocks(blocks.numpy(), qtype, (2, 256)))


# ------------------------------------------------------------------ placement (issue 14, item 1)
@pytest.mark.parametrize("fmt", FORMATS)
def test_search_hits_as_tensors_index_packed_memory(fmt):
    memory = trits((6, 70), 7)
    packed = tn.pack(memory, fmt)
    hits, _ = tn.vsa.search(torch.from_numpy(memory[[4, 1]]), torch.from_numpy(memory), k=2)
    assert isinstance(hits, torch.Tensor)
    rows = packed[hits]
    assert isinstance(rows, tn.PackedTrits) and rows.shape == (2, 2, 70)
    np.testing.assert_array_equal(rows.unpack(), memory[hits.numpy()])
    np.testing.assert_array_equal(packed[torch.tensor(3)].unpack(), memory[3])
    w = tn.quantize(floats((6, 32)), axis=-1)
    np.testing.assert_array_equal(w[torch.tensor([5, 0])].dequantize(),
                                  w.dequantize()[[5, 0]])
    with pytest.raises(TypeError, match="integers"):
        packed[torch.tensor([True, False, True, False, True, False])]


@pytest.mark.parametrize("group_size", [None, 16])
def test_dequantize_is_a_kernel_on_the_resolved_device(group_size, device, kernel_devices):
    w = tn.quantize(torch.from_numpy(floats((3, 64))), group_size=group_size)
    want = tn.quantize(floats((3, 64)), group_size=group_size)
    split = want.packed.unpack().reshape(3, -1, group_size or 64).astype(np.float32)
    scales = want.scales.reshape(3, -1, 1) if group_size else want.scales
    kernel_devices.clear()
    same(w.dequantize(device=device), (split * scales).reshape(3, 64))
    assert {("dequantize", device), ("dequantize_packed", device)} & set(kernel_devices)
    assert {dev for _, dev in kernel_devices} == {device}


def test_ternary_gguf_export_runs_on_the_device_asked_for(kernel_devices):
    t = tn.quantize(floats((2, 256), seed=8), group_size=64)  # mixed scales: a loss to measure
    want = tn.io.to_gguf_blocks(t, "TQ2_0", requantize=True)
    kernel_devices.clear()
    got = tn.io.to_gguf_blocks(t, "TQ2_0", requantize=True, device="numpy")
    np.testing.assert_array_equal(got, want)
    assert kernel_devices and {dev for _, dev in kernel_devices} == {"numpy"}, kernel_devices


def test_gguf_blocks_from_a_uint8_tensor():
    x = floats((2, 256), seed=9)
    blocks = tn.io.to_gguf_blocks(x, "TQ1_0")
    same(tn.io.from_gguf_blocks(torch.from_numpy(blocks), "TQ1_0", x.shape),
         tn.io.from_gguf_blocks(blocks, "TQ1_0", x.shape))
