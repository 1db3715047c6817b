"""torch is optional: with it missing, ``import tritnum`` and every op that needs no torch work.

Each test runs a fresh interpreter in which ``import torch`` fails (``sys.modules``
holds ``None`` for it, as when the extra is not installed), and compares with NumPy.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCK_TORCH = "import sys; sys.modules['torch'] = None\n"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH + textwrap.dedent(code)],
                          capture_output=True, text=True, check=False)


def test_ops_work_without_torch(tmp_path):
    out = _run(f"""
        import numpy as np, tritnum as tn
        rng = np.random.default_rng(0)
        t = rng.integers(-1, 2, (8, 256), dtype=np.int8)
        assert (tn.unpack(tn.pack(t, "base3")) == t).all()
        w = tn.quantize(rng.standard_normal((8, 256)).astype(np.float32))
        x = rng.standard_normal((2, 256)).astype(np.float32)
        want = x.astype(np.float64) @ tn.dequantize(w).astype(np.float64).T
        assert np.allclose(tn.linear(x, w, activations="float"), want, rtol=1e-5, atol=1e-4)
        hv = tn.vsa.random(4, 512, seed=1, format="bitplane")
        assert np.array_equal(tn.unpack(tn.vsa.bind(hv, hv)), tn.unpack(hv) ** 2)
        tn.io.write_gguf({str(tmp_path / 'm.gguf')!r}, {{"w": w}})
        back = tn.io.read_gguf({str(tmp_path / 'm.gguf')!r})
        assert np.array_equal(tn.unpack(back["w"].packed), tn.unpack(w.packed))
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
        print("ok")
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_tritnum_torch_names_the_extra():
    out = _run("import tritnum.torch")
    assert out.returncode != 0
    assert ("ImportError: tritnum.torch needs PyTorch: pip install torch (or, from a tritnum "
            "checkout, pip install -e '.[torch]')") in out.stderr
