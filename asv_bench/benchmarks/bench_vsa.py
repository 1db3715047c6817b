"""tn.vsa at d = 10,000: random, bind, bundle, similarity search, dense and bitplane."""

import functools

import tritnum as tn

D = 10_000


@functools.cache
def hypervectors(n, fmt, seed):
    return tn.vsa.random(n, D, seed=seed, format=fmt)


class VSA:
    params = (["dense", "bitplane"], ["cpu"])  # the NumPy reference would need GBs here
    param_names = ["format", "device"]
    timeout = 300

    def setup(self, fmt, device):
        self.a = hypervectors(1000, fmt, 1)
        self.b = hypervectors(1000, fmt, 2)
        self.memory = hypervectors(10_000, fmt, 3)
        self.query = hypervectors(1, fmt, 4)
        small = hypervectors(8, fmt, 5)
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

    def peakmem_search(self, fmt, device):
        tn.vsa.search(self.query, self.memory, 1, "dot", device=device)
