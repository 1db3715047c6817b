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


class QuantizeGGUF:
    """quantize_gguf (TQ2_0) of a generated llama-shaped F16 file of 135 MiB, against the
    gguf package's reader, NumPy codec and writer doing the same."""

    params = ["tritnum", "gguf"]
    param_names = ["implementation"]
    timeout = 600

    def setup(self, impl):
        import tempfile

        from tritnum._bench.gguf_files import write_f16_model

        if impl == "gguf" and quants is None:
            raise NotImplementedError("the gguf package is not installed")
        self.folder = tempfile.TemporaryDirectory()
        self.src = f"{self.folder.name}/f16.gguf"
        self.dst = f"{self.folder.name}/tq2.gguf"
        write_f16_model(self.src, n_embd=1024, n_ff=2816, n_vocab=8000, n_layer=4)
        tn.io.quantize_gguf(self.src, self.dst, progress=False)  # compile outside the timing

    def teardown(self, impl):
        self.folder.cleanup()

    def time_quantize_gguf(self, impl):
        self._run(impl)

    def peakmem_quantize_gguf(self, impl):
        self._run(impl)

    def _run(self, impl):
        from tritnum._bench.gguf_files import gguf_package_quantize

        if impl == "gguf":
            gguf_package_quantize(self.src, self.dst)
        else:
            tn.io.quantize_gguf(self.src, self.dst, progress=False)
