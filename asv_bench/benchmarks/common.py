"""Seeded, cached data builders shared by the benchmarks."""

import functools

import numpy as np

import tritnum as tn

# 4096 x 16000 = 65.5 M trits: rows fill whole units of every format, beyond L3 (32 MiB)
ROWS, COLS = 4096, 16000


@functools.cache
def trits(rows=ROWS, cols=COLS):
    return np.random.default_rng(0).integers(-1, 2, size=(rows, cols), dtype=np.int8)


@functools.cache
def packed(fmt, rows=ROWS, cols=COLS):
    return tn.pack(trits(rows, cols), fmt)
