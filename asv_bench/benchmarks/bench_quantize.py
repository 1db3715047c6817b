"""tn.quantize / quantize_activations and the GGUF block codecs on a 4096 x 4096 matrix."""

import numpy as np

import tritnum as tn

try:
    from gguf import GGMLQuantizationType, quants
except ImportError:  # the bench extra brings gguf
    quants = None


def weights():
    return np.random.default_rng(1).standard_normal((4096, 4096), dtype=np.float32)


class Quantize:
    params = (["2bit", "base3", "bitplane"], [None, -1])
    param_names = ["format", "axis"]
    timeout = 300

    def setup(self, fmt, axis):
        self.w = weights()
        tn.quantize(self.w[:4], format=fmt, axis=axis)  # compile outside the timing

    def time_quantize(self, fmt, axis):
        tn.quantize(self.w, format=fmt, axis=axis)

    def peakmem_quantize(self, fmt, axis):
        tn.quantize(self.w, format=fmt, axis=axis)


class QuantizeActivations:
    params = [1, 256]
    param_names = ["rows"]

    def setup(self, rows):
        self.x = np.random.default_rng(2).standard_normal((rows, 4096), dtype=np.float32)
        tn.quantize_activations(self.x)

    def time_quantize_activations(self, rows):
        tn.quantize_activations(self.x)


class GGUFBlocks:
    params = (["TQ2_0", "TQ1_0", "I2_S"], ["tritnum", "gguf"])
    param_names = ["qtype", "implementation"]
    timeout = 300

    def setup(self, qtype, impl):
        if impl == "gguf" and (quants is None or qtype == "I2_S"):
            raise NotImplementedError("the gguf package has no I2_S, or is not installed")
        self.w = weights()
        self.buf = tn.io.to_gguf_blocks(self.w, qtype)

    def time_to_gguf_blocks(self, qtype, impl):
        if impl == "gguf":
            quants.quantize(self.w, getattr(GGMLQuantizationType, qtype))
        else:
            tn.io.to_gguf_blocks(self.w, qtype)

    def time_from_gguf_blocks(self, qtype, impl):
        if impl == "gguf":
            quants.dequantize(self.buf, getattr(GGMLQuantizationType, qtype))
        else:
            tn.io.from_gguf_blocks(self.buf, qtype, self.w.shape)


class GGUFDecodeInto:
    """Decoding into a reused array (``out=``): no page faults on a fresh result."""

    params = ["TQ2_0", "TQ1_0", "I2_S"]
    param_names = ["qtype"]

    def setup(self, qtype):
        w = weights()
        self.shape = w.shape
        self.buf = tn.io.to_gguf_blocks(w, qtype)
        self.values = np.empty_like(w)

    def time_from_gguf_blocks_into_out(self, qtype):
        tn.io.from_gguf_blocks(self.buf, qtype, self.shape, out=self.values)
