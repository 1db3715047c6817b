"""tn.linear (GEMV and GEMM) against NumPy float32 ``x @ W.T`` on OpenBLAS, and its memory."""

import os
import subprocess
import sys

import numpy as np

import tritnum as tn

# every byte holds four valid 2bit codes: the 81 bytes with no code 3
_VALID_BYTES = np.array([b for b in range(256) if all((b >> s) & 3 != 3 for s in (0, 2, 4, 6))],
                        np.uint8)


def packed_weights(out, n, seed=0):
    """Random 2bit weights built straight as bytes: no dense copy ever exists."""
    idx = np.random.default_rng(seed).integers(0, _VALID_BYTES.size, (out, n // 4), np.uint8)
    data = _VALID_BYTES[idx]
    return tn.TernaryTensor(tn.PackedTrits(data, (out, n), "2bit"), np.float32(0.05))


class Linear:
    """4096 x 4096: one row (GEMV) and 256 rows (GEMM), float, int8 and q8_k activations."""

    params = ([1, 256], ["float", "int8", "q8_k"], ["cpu", "cuda", "blas"])
    param_names = ["rows", "activations", "implementation"]
    timeout = 300

    def setup(self, rows, activations, impl):
        if impl == "cuda" and not tn.cuda_available():
            raise NotImplementedError("no GPU")
        self.activations = activations
        self.w = packed_weights(4096, 4096)
        self.x = np.random.default_rng(1).standard_normal((rows, 4096), dtype=np.float32)
        if impl == "blas":
            if activations != "float":
                raise NotImplementedError("BLAS has one (float32) baseline")
            self.dense = self.w.dequantize()
        elif impl == "cuda":
            from numba import cuda

            self.x = cuda.to_device(self.x)
            self.w = tn.TernaryTensor(tn.PackedTrits(cuda.to_device(self.w.packed.data),
                                                     self.w.shape, "2bit"), self.w.scales)
        self.run()  # compile, check the weights

    def run(self):
        if hasattr(self, "dense"):
            return self.x @ self.dense.T
        return tn.linear(self.x, self.w, activations=self.activations)

    def time_linear(self, rows, activations, impl):
        self.run()


class GroupScales:
    """4096 x 4096 on the CPU with a scale per tensor or per group of 32 to 256 inputs."""

    params = ([1, 256], ["float", "int8"], [0, 32, 64, 128, 256])
    param_names = ["rows", "activations", "group_size"]
    timeout = 300

    def setup(self, rows, activations, group_size):
        w = packed_weights(4096, 4096)
        if group_size:
            scales = np.random.default_rng(2).uniform(0.01, 1, (4096, 4096 // group_size))
            w = tn.TernaryTensor(w.packed, scales.astype(np.float32), group_size)
        self.w = w
        self.x = np.random.default_rng(1).standard_normal((rows, 4096), dtype=np.float32)
        self.activations = activations
        self.time_linear(rows, activations, group_size)  # compile

    def time_linear(self, rows, activations, group_size):
        tn.linear(self.x, self.w, activations=self.activations, device="cpu")


class LinearBeyondL3:
    """GEMV on 16384 x 8192: 32 MiB of packed weights (BLAS would read 512 MiB).

    ``peakmem_linear`` minus ``peakmem_setup`` is the extra memory of one call;
    the issue's bar is 10% of the float32 weights (51 MiB).
    """

    params = ["float", "int8"]
    param_names = ["activations"]
    timeout = 300

    def setup(self, activations):
        self.w = packed_weights(16384, 8192)
        self.x = np.random.default_rng(1).standard_normal(8192, dtype=np.float32)
        tn.linear(self.x, self.w, activations=activations)

    def time_linear(self, activations):
        tn.linear(self.x, self.w, activations=activations)

    def peakmem_linear(self, activations):
        tn.linear(self.x, self.w, activations=activations)

    def peakmem_setup(self, activations):
        pass


class FirstCall:
    """Seconds of a new process's first ``linear`` call: compiled cold, or loaded from cache."""

    params = ["cold", "cached"]
    param_names = ["cache"]
    timeout = 300
    _script = ("import time, numpy as np, tritnum as tn; w = tn.quantize(np.ones((8, 256)));"
               "x = np.ones(256, np.float32); s = time.perf_counter();"
               "tn.linear(x, w); tn.linear(x, w, activations='int8');"
               "print(time.perf_counter() - s)")

    def _first_call(self, cache):
        env = dict(os.environ, TRITNUM_CACHE="0" if cache == "cold" else "1")
        out = subprocess.run([sys.executable, "-c", self._script], env=env, check=True,
                             capture_output=True, text=True)
        return float(out.stdout.split()[-1])

    def setup(self, cache):
        self._first_call(cache)  # fills the cache for the "cached" case

    def track_first_call_seconds(self, cache):
        return self._first_call(cache)

    track_first_call_seconds.unit = "seconds"
