"""tn.vsa at d = 10,000: random, bind, bundle, search (1 and 100 queries), Centroid.fit."""

import functools

import tritnum as tn

D = 10_000


@functools.cache
def hypervectors(n, fmt, seed):
    return tn.vsa.random(n, D, seed=seed, format=fmt)


def _on_gpu(h):
    """The same hypervectors in GPU memory."""
    from numba import cuda

    if isinstance(h, tn.PackedTrits):
        return tn.PackedTrits(cuda.to_device(h.data), h.shape, h.format)
    return cuda.to_device(h)


class VSA:
    params = (["dense", "bitplane"], ["cpu", "cuda"])  # the NumPy reference needs GBs here
    param_names = ["format", "device"]
    timeout = 300

    def setup(self, fmt, device):
        if device == "cuda" and not tn.cuda_available():
            raise NotImplementedError("no GPU")
        on = _on_gpu if device == "cuda" else (lambda h: h)
        self.a = on(hypervectors(1000, fmt, 1))
        self.b = on(hypervectors(1000, fmt, 2))
        self.memory = on(hypervectors(10_000, fmt, 3))
        self.query = on(hypervectors(1, fmt, 4))
        self.queries = on(hypervectors(100, fmt, 6))
        self.labels = [i % 10 for i in range(1000)]
        small = on(hypervectors(8, fmt, 5))
        # compile outside the timing
        tn.vsa.random(2, 70, format=fmt, device=device)
        tn.vsa.bind(small, small, device=device)
        tn.vsa.bundle(small, device=device)
        tn.vsa.search(small, small, 1, "dot", device=device)

    def time_random(self, fmt, device):
        tn.vsa.random(1000, D, format=fmt, device=device)

    def time_bind(self, fmt, device):
        tn.vsa.bind(self.a, self.b, device=device)

    def time_bundle(self, fmt, device):
        tn.vsa.bundle(self.a, device=device)

    def time_search(self, fmt, device):
        tn.vsa.search(self.query, self.memory, 1, "dot", device=device)

    def time_search_batch(self, fmt, device):
        tn.vsa.search(self.queries, self.memory, 1, "dot", device=device)

    def time_centroid_fit(self, fmt, device):
        tn.vsa.Centroid(device=device).fit(self.a, self.labels)

    def peakmem_search(self, fmt, device):
        tn.vsa.search(self.query, self.memory, 1, "dot", device=device)
