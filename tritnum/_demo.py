"""``python -m tritnum demo``: what tritnum does, on embedded data, in under a minute.

1. Quantizes a BitNet-sized float32 layer (4096 x 11008 by default) to ternary and
   shows its memory in every format.
2. Measures what quantizing costs: the relative error of ``x @ W.T`` with the
   ternary weights against the original float weights (about 0.5 on these random
   Gaussian weights; BitNet models are trained with ternary weights to live with it).
   Then runs ``tn.linear`` on the ternary layer against NumPy float32 ``x @ W.T``
   (BLAS) on the same ternary weights: speed ratio, and the kernel's own error against
   float64 math, for float and int8 activations.
3. Writes the layer to a GGUF file as TQ2_0 in a temporary folder and reads it back.
4. Classifies scikit-learn's bundled digits with ternary hypervectors (HDC; skipped,
   saying so, without scikit-learn: ``pip install scikit-learn``).
5. Times a similarity search of ternary hypervectors against NumPy.

Each row is printed as soon as its step finishes; every timing is a median of warm
calls (the first call, which compiles or loads the kernels, is not timed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def _median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def tn_unpack(packed: Any) -> np.ndarray:
    from .packing import unpack

    return unpack(packed)


def _speed(baseline: float, ours: float) -> str:
    """``2.5x faster`` or ``1.3x slower``: never a ratio below 1 called faster."""
    if ours <= baseline:
        return f"{baseline / ours:.1f}x faster"
    return f"{ours / baseline:.1f}x slower"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _layer(rows: list[tuple[str, str]], args: argparse.Namespace) -> dict[str, Any]:
    import tritnum as tn

    rng = np.random.default_rng(args.seed)
    w = rng.standard_normal((args.out_features, args.in_features), dtype=np.float32)
    tw = tn.quantize(w, device=args.device)
    seconds = _median_seconds(lambda: tn.quantize(w, device=args.device), args.repeats)
    rows.append(("quantize", f"{w.shape[0]} x {w.shape[1]} float32 ({_mib(w.nbytes)}) "
                             f"in {seconds * 1e3:.1f} ms"))
    for fmt in tn.FORMATS:
        size = tn.nbytes(w.shape, fmt) + 4
        rows.append((f"memory {fmt}", f"{_mib(size)}: {w.nbytes / size:.1f}x smaller "
                                      f"than float32 ({8 * size / w.size:.2f} bits/weight)"))
    return {"w": w, "tw": tw}


def _matmul(rows: list[tuple[str, str]], args: argparse.Namespace, state: dict) -> None:
    import tritnum as tn

    tw = state["tw"]
    dense = tw.dequantize()
    x = np.random.default_rng(args.seed + 1).standard_normal(dense.shape[1], dtype=np.float32)
    blas = _median_seconds(lambda: x @ dense.T, args.repeats)
    exact = x.astype(np.float64) @ dense.astype(np.float64).T
    original = (x @ state["w"].T).astype(np.float64)  # float32 is plenty for an error of ~0.5
    loss = np.linalg.norm(exact - original) / np.linalg.norm(original)
    rows.append(("quantization error", f"rel. error {loss:.3f} of x @ W.T, ternary weights vs "
                                       f"the original float ones (the cost of ternary on a "
                                       f"random, untrained layer)"))
    for activations in ("float", "int8"):
        y = tn.linear(x, tw, activations=activations, device=args.device)
        ours = _median_seconds(lambda a=activations: tn.linear(x, tw, activations=a,
                                                               device=args.device),
                               args.repeats)
        err = np.linalg.norm(y - exact) / np.linalg.norm(exact)
        why = "from quantizing x to int8" if activations == "int8" else "kernel rounding only"
        rows.append((f"linear GEMV {activations}",
                     f"{ours * 1e3:.2f} ms vs BLAS {blas * 1e3:.2f} ms: {_speed(blas, ours)}; "
                     f"rel. error {err:.1e} vs float64 math on the same ternary weights ({why})"))
    del state["w"]


def _gguf(rows: list[tuple[str, str]], args: argparse.Namespace, state: dict) -> None:
    import tritnum as tn

    tw = state["tw"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "layer.gguf")
        tn.io.write_gguf(path, {"blk.0.ffn_up.weight": tw}, qtype="TQ2_0")
        back = tn.io.read_gguf(path)["blk.0.ffn_up.weight"]
        same = np.array_equal(tn.unpack(back.packed), tn.unpack(tw.packed))
        rows.append(("GGUF TQ2_0", f"wrote and read {_mib(os.path.getsize(path))}: trits "
                                   f"{'identical' if same else 'DIFFER'}"))


def _hdc(rows: list[tuple[str, str]], args: argparse.Namespace, state: dict) -> None:
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        from ._extras import install_hint

        rows.append(("HDC digits", f"skipped: the digits come with scikit-learn "
                                   f"({install_hint('demo')})"))
        return

    from . import vsa

    images, labels = load_digits(return_X_y=True)  # 8x8 images, 17 intensities, bundled
    train, test, y_train, y_test = train_test_split(
        images.astype(np.int64), labels, test_size=0.25, random_state=args.seed, stratify=labels)
    levels = vsa.level(17, args.dim, density=1.0, seed=args.seed, format="bitplane")
    pixels = vsa.random(64, args.dim, seed=args.seed + 1, format="bitplane")
    model = vsa.Centroid(epochs=3).fit(vsa.encode_features(train, levels, pixels), y_train)
    accuracy = model.score(vsa.encode_features(test, levels, pixels), y_test)
    rows.append(("HDC digits", f"accuracy {accuracy:.1%} at d = {args.dim} "
                               f"({len(train)} train / {len(test)} test images)"))


def _search(rows: list[tuple[str, str]], args: argparse.Namespace, state: dict) -> None:
    from . import vsa

    memory = vsa.random(10_000, args.dim, seed=args.seed, format="bitplane")
    query = vsa.random(1, args.dim, seed=args.seed + 2, format="bitplane")
    dense_memory = tn_unpack(memory).astype(np.float32)
    dense_query = tn_unpack(query)[0].astype(np.float32)
    ours = _median_seconds(lambda: vsa.search(query, memory, k=1, metric="dot"), args.repeats)
    numpy = _median_seconds(lambda: np.argmax(dense_memory @ dense_query), args.repeats)
    rows.append(("similarity search", f"1 query vs 10,000 stored (bitplanes, "
                                      f"{_mib(memory.nbytes)}): {ours * 1e3:.2f} ms vs NumPy "
                                      f"float32 {numpy * 1e3:.2f} ms: {_speed(numpy, ours)}"))


STEPS = {"quantize a layer": None, "ternary matmul": _matmul, "GGUF round trip": _gguf,
         "HDC classifier": _hdc, "similarity search": _search}
WIDTH = 19  # the longest row name


def main(args: argparse.Namespace) -> int:
    """Run every step, printing its rows as soon as it finishes."""
    start = time.perf_counter()
    print("tritnum demo", flush=True)
    state: dict[str, Any] = {}
    for step in STEPS.values():
        rows: list[tuple[str, str]] = []
        if step is None:
            state = _layer(rows, args)
        else:
            step(rows, args, state)
        for key, value in rows:
            print(f"  {key:<{WIDTH}}  {value}", flush=True)
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


def _in_features(text: str) -> int:
    n = int(text)
    if n < 256 or n % 256:
        raise argparse.ArgumentTypeError(
            f"must be a positive multiple of 256 (GGUF TQ2_0 blocks), got {n}")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options."""
    parser.add_argument("--out-features", type=int, default=4096, help="layer rows (4096)")
    parser.add_argument("--in-features", type=_in_features, default=11008,
                        help="layer columns, a multiple of 256 (11008)")
    parser.add_argument("--dim", type=int, default=10_000, help="hypervector dimension (10000)")
    parser.add_argument("--repeats", type=int, default=10, help="timed repeats per case (10)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "numpy"],
                        help="where tritnum runs (auto)")
