"""Whole-file cases: ``quantize_gguf`` of a generated F16 model against the ``gguf`` package.

The baseline does what a user of the ``gguf`` package writes for the same job: read
with ``GGUFReader``, quantize the same tensors with ``gguf.quants.quantize``, copy the
rest and the metadata, write with ``GGUFWriter``. The note gives the peak resident
memory of a fresh child process that runs ``quantize_gguf`` once.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from .harness import Case

# llama-7B-like widths; the layer count sets the size (full run: about 1 GiB of F16)
_FULL = {"n_embd": 2048, "n_ff": 5632, "n_vocab": 32000, "n_layer": 7}
_QUICK = {"n_embd": 512, "n_ff": 1536, "n_vocab": 4096, "n_layer": 2}


def write_f16_model(path: str | os.PathLike[str], n_embd: int, n_ff: int, n_vocab: int,
                    n_layer: int) -> int:
    """A llama-shaped F16 GGUF file of random weights (norms F32); returns its size."""
    from ..io import write_gguf

    rng = np.random.default_rng(0)

    def weight(*shape: int) -> np.ndarray:  # random halves of |x| < 1 (exponent <= 14)
        return (rng.integers(0, 1 << 16, shape, dtype=np.uint16) & 0xBBFF).view(np.float16)

    tensors = {"token_embd.weight": weight(n_vocab, n_embd)}
    for i in range(n_layer):
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensors[f"blk.{i}.{name}.weight"] = weight(n_embd, n_embd)
        tensors[f"blk.{i}.ffn_gate.weight"] = weight(n_ff, n_embd)
        tensors[f"blk.{i}.ffn_up.weight"] = weight(n_ff, n_embd)
        tensors[f"blk.{i}.ffn_down.weight"] = weight(n_embd, n_ff)
        tensors[f"blk.{i}.attn_norm.weight"] = np.ones(n_embd, np.float32)
        tensors[f"blk.{i}.ffn_norm.weight"] = np.ones(n_embd, np.float32)
    tensors["output_norm.weight"] = np.ones(n_embd, np.float32)
    tensors["output.weight"] = weight(n_vocab, n_embd)
    metadata = {"llama.embedding_length": n_embd, "llama.feed_forward_length": n_ff,
                "llama.block_count": n_layer, "llama.context_length": 2048,
                "general.file_type": 1}
    return write_gguf(path, tensors, metadata=metadata, arch="llama", progress=False).nbytes


def gguf_package_quantize(src: str, dst: str, qtype: str = "TQ2_0") -> None:
    """``src`` quantized with the ``gguf`` package's reader, NumPy codecs and writer.

    The same tensors as :func:`tritnum.io.quantize_gguf` chooses for a llama file.
    """
    import gguf

    from ..io.gguf.quantize import FILE_TYPES

    kind = gguf.GGMLQuantizationType[qtype]
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type"):
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), field.types[0], sub_type=sub)
    writer.add_file_type(FILE_TYPES[qtype])
    for t in reader.tensors:
        keep = (t.name in ("token_embd.weight", "output.weight") or len(t.shape) < 2
                or "_norm" in t.name or int(t.shape[0]) % 256)
        if keep:
            writer.add_tensor(t.name, t.data)
        else:
            writer.add_tensor(t.name, gguf.quants.quantize(np.asarray(t.data, np.float32), kind),
                              raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


_CHILD = r"""
import json, resource, sys


def peak():  # VmHWM: this program's own; ru_maxrss keeps the parent's from before the exec
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) << 10
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10


import tritnum as tn
src, dst = sys.argv[1:3]
before = peak()
tn.io.quantize_gguf(src, dst, "TQ2_0", progress=False)  # kernels from numba's disk cache
print(json.dumps({"before": before, "peak": peak()}))
"""


def child_peak_rss(src: str, dst: str) -> dict[str, int]:
    """Peak resident bytes of a fresh process that runs ``quantize_gguf(src, dst)`` once.

    With its peak before the call (Python, NumPy and tritnum imported), as
    ``/usr/bin/time -v`` reports a one-off command's.
    """
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", _CHILD, src, dst], capture_output=True,
                          text=True, check=True, env=env,
                          cwd=Path(__file__).resolve().parents[2])  # this tritnum
    return json.loads(done.stdout.splitlines()[-1])


def gguf_file_cases(quick: bool, device: str, stack: contextlib.ExitStack) -> list[Case]:
    """``quantize_gguf`` TQ2_0 of a generated F16 file (21 MiB quick, 936 MiB in full).

    The file lives in a temporary folder that ``stack`` removes when the run ends.
    """
    if device not in ("auto", "cpu"):  # a file pipeline: it runs its kernels on the CPU
        return []
    try:
        import gguf  # noqa: F401
    except ImportError:  # pragma: no cover - gguf is in install_requires
        return []
    from ..io import quantize_gguf

    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="tritnum-bench-"))
    src = os.path.join(folder, "f16.gguf")
    size = write_f16_model(src, **(_QUICK if quick else _FULL))
    ours, theirs = (os.path.join(folder, f"{n}.gguf") for n in ("tritnum", "gguf"))

    def note(seconds: float) -> str:
        rss = child_peak_rss(src, ours)
        return (f"{size / seconds / 1e9:.2f} GB/s of F16 in; peak RSS {rss['peak'] >> 20} MiB "
                f"= {rss['peak'] / size:.0%} of the {size >> 20} MiB file (after imports: "
                f"{rss['before'] >> 20} MiB)")

    return [Case("gguf", f"quantize_gguf TQ2_0, {size >> 20} MiB F16 file",
                 lambda: quantize_gguf(src, ours, "TQ2_0", progress=False),
                 "gguf package (reader, quants, writer)",
                 lambda: gguf_package_quantize(src, theirs), 5.0, 3, note)]
