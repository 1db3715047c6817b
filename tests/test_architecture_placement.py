"""Placement belongs to dispatch: public modules hold no host/device copying code of their own.

Moving arrays between the host and the GPU, and making GPU arrays contiguous, is done in
``tritnum/_interop.py`` and ``tritnum/_dispatch.py`` (``contiguous``, ``flat``, ``take``,
``copy_into``, ``call``, ``place``): there it is done once, on the right device, and
never through the host by accident. This test reads the public modules' source and
fails on the calls that hand-written placement is made of.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tritnum"
PLACEMENT = {"_interop.py", "_dispatch.py"}  # where placement lives
# tritnum/*.py and the public packages; the backends (_kernels/) and tools (_bench/) are not
# public code
PUBLIC = sorted(
    [p for p in PACKAGE.glob("*.py") if p.name not in PLACEMENT]
    + [p for folder in ("vsa", "io", "torch") for p in (PACKAGE / folder).rglob("*.py")]
)
FORBIDDEN = re.compile(
    r"copy_to_host|copy_to_device|is_c_contiguous|cuda\.to_device|\bto_gpu\("
)
ALLOWED: dict[str, str] = {}  # "path:line": why (none: every hit is moved to _interop)


def _hits(path: Path) -> list[str]:
    rel = path.relative_to(PACKAGE.parent).as_posix()
    return [f"{rel}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if FORBIDDEN.search(line) and f"{rel}:{n}" not in ALLOWED]


def test_the_scan_covers_the_public_modules():
    names = {p.relative_to(PACKAGE).as_posix() for p in PUBLIC}
    assert {"packing.py", "matmul.py", "compress.py", "vsa/_hv.py", "io/gguf/blocks.py"} <= names
    assert not names & PLACEMENT


def test_the_pattern_catches_hand_written_placement():
    for line in ("data = to_gpu(data.copy_to_host())", "target.copy_to_device(y)",
                 "if not a.is_c_contiguous():", "cuda.to_device(x)", "x = to_gpu(y)"):
        assert FORBIDDEN.search(line), line
    for line in ("contiguous(a, np.int8)", "copy_into(target, y)", "place(y, like)"):
        assert not FORBIDDEN.search(line), line


@pytest.mark.parametrize("path", PUBLIC, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_public_modules_leave_placement_to_interop_and_dispatch(path):
    hits = _hits(path)
    assert not hits, (
        "host/device placement written by hand in a public module; use "
        "tritnum._interop (contiguous, flat, take, copy_into, to_host) and "
        "tritnum._dispatch (call, place):\n" + "\n".join(hits))
