"""tn.compress / decompress / ErrorFeedback of a 16 M-element float32 gradient at ratio 16."""

import numpy as np

import tritnum as tn

N = 1 << 24


class Compress:
    params = [["cpu", "cuda"], ["unbiased", "projection"]]
    param_names = ["device", "estimate"]
    timeout = 300

    def setup(self, device, estimate):
        if device == "cuda" and not tn.cuda_available():
            raise NotImplementedError("no GPU")
        g = np.random.default_rng(0).standard_normal(N, dtype=np.float32)
        if device == "cuda":
            from numba import cuda

            g = cuda.to_device(g)
        self.g = g
        self.sketch = tn.compress(g, 16, seed=0, device=device)
        self.out = tn.decompress(self.sketch, estimate=estimate, device=device)  # compiled
        self.feedback = tn.ErrorFeedback(16, seed=0, device=device)
        self.feedback(g)

    def time_compress(self, device, estimate):
        tn.compress(self.g, 16, seed=0, device=device)

    def time_decompress_out(self, device, estimate):
        tn.decompress(self.sketch, estimate=estimate, out=self.out, device=device)

    def time_error_feedback_step(self, device, estimate):
        self.feedback(self.g)
