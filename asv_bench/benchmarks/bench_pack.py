"""pack / unpack per format against np.packbits / np.unpackbits on the same element count."""

import subprocess
import sys

import numpy as np

import tritnum as tn

from .common import packed, trits


class Pack:
    params = (list(tn.FORMATS), ["cpu", "numpy"])
    param_names = ["format", "device"]
    timeout = 300

    def setup(self, fmt, device):
        self.trits = trits()
        self.packed = packed(fmt)
        tn.pack(self.trits[:2], fmt, device=device)  # compile outside the timing
        tn.unpack(self.packed, device="cpu")

    def time_pack(self, fmt, device):
        tn.pack(self.trits, fmt, device=device)

    def time_unpack(self, fmt, device):
        tn.unpack(self.packed, device=device)

    def peakmem_pack(self, fmt, device):
        tn.pack(self.trits, fmt, device=device)


class Baseline:
    def setup(self):
        self.bools = trits() > 0
        self.bits = np.packbits(self.bools)

    def time_packbits(self):
        np.packbits(self.bools)

    def time_unpackbits(self):
        np.unpackbits(self.bits)


def track_first_call_seconds():
    """Seconds to import tritnum and run the first pack in a fresh process (cache warm)."""
    code = ("import time; t = time.perf_counter(); import numpy as np, tritnum as tn; "
            "tn.pack(np.zeros((2, 320), np.int8)); print(time.perf_counter() - t)")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # fill cache
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return float(out.stdout)


track_first_call_seconds.unit = "seconds"
