"""The 2bit GEMV's paths are kernels of their own: a call compiles only the one it takes.

issue 29 item 4: the GEMV's row driver held every path (one scale a row, groups of
whole blocks or inside a block, other groups of whole lanes, segments that are not
whole blocks; int8 and float activations) as branches, so the first call compiled all
of them. A fresh process runs one GEMV a path and reports which ``_gemv_*`` kernels
gained a signature (compiled, or loaded from the disk cache) with each call, and how
far each result is from the NumPy reference route.
"""

import json

import pytest
from test_dispatch import run_python

from tritnum._kernels.cpu import group_gemv

# (inputs, group size, activations) -> the only GEMV kernel the call may add: shapes
# whose path is the same whether the SIMD block is 32 (AVX2) or 64 bytes (AVX-512); the
# kernels of scale groups are one a size of the dot, the group's weight bytes
CASES = [
    (512, None, "int8", "_gemv_scaled[True]"),  # a kernel a dtype of x: is it int8
    (512, None, "float", "_gemv_scaled[False]"),
    (512, 32, "int8", "_gemv_int8_groups[8]"),  # 8 weight bytes a group: inside a block
    (512, 32, "float", "_gemv_float_groups[8]"),
    (512, 64, "int8", "_gemv_int8_groups[16]"),
    (512, 64, "float", "_gemv_float_groups[16]"),
    # 64 bytes: one AVX-512 block (its halves, four rows a dot), two AVX2 blocks (whole)
    (1024, 256, "int8", "_gemv_int8_groups[64]"),
    (768, 96, "int8", "_gemv_lanes"),  # 24 bytes: neither whole blocks nor inside one
    (768, 96, "float", "_gemv_lanes"),
    (1056, None, "int8", "_gemv_segments"),  # 264 bytes a row: a partial last block
    (1056, None, "float", "_gemv_segments"),
]

# int8 x on weights in groups of whole 16-input steps, where the CPU has VNNI and GFNI:
# the GEMV on laid-out rows (group_gemv) in place of the packed rows' kernels above, one
# kernel for every group size (compiled by the first such call, nothing new after it)
LAID_OUT = group_gemv.ROW_TILE is not None
LAID = [i for i, (_, g, act, _) in enumerate(CASES)
        if LAID_OUT and act == "int8" and g and g % 16 == 0]
ROUTED = [(n, g, act, kernel if i not in LAID else "_gemv_blocks" if i == LAID[0] else None)
          for i, (n, g, act, kernel) in enumerate(CASES)]

CODE = """
import json, os, sys
import numpy as np
import tritnum as tn
from tritnum._kernels.cpu import group_gemv, matmul
from tritnum._kernels.cpu._parallel import MIN_PARALLEL_BYTES

if os.environ.get("PACKED_ROWS"):  # the packed rows' GEMV for every group size
    group_gemv.applies = lambda *args: False
kernels = {}
if hasattr(group_gemv._gemv_blocks, "signatures"):  # a kernel where the CPU can run it
    kernels["_gemv_blocks"] = group_gemv._gemv_blocks
for name, k in vars(matmul).items():  # a kernel, or a dict of them by the bytes of a dot
    if name.startswith("_gemv_"):
        for key, kernel in (k.items() if isinstance(k, dict) else [(None, k)]):
            if hasattr(kernel, "signatures"):
                kernels[name if key is None else f"{name}[{key}]"] = kernel
rng = np.random.default_rng(0)
report = []
for n, g, act, _ in json.loads(sys.argv[1]):
    # past MIN_PARALLEL_BYTES of packed rows: smaller layers take one-call routes (small
    # layers' codes, or the GEMV kernels' copies that run alone)
    rows = -(-4 * MIN_PARALLEL_BYTES // n)
    w = tn.quantize(rng.standard_normal((rows, n)).astype(np.float32), group_size=g)
    x = rng.standard_normal((3, n)).astype(np.float32)
    before = {name: len(k.signatures) for name, k in kernels.items()}
    y = tn.linear(x, w, activations=act, device="cpu")
    added = sorted(name for name, k in kernels.items() if len(k.signatures) > before[name])
    want = tn.linear(x, w, activations=act, device="numpy")
    report.append([added, float(np.max(np.abs(y - want)) / np.max(np.abs(want)))])
print(json.dumps(report))
"""


@pytest.fixture(scope="module", params=["routed", "packed rows"])
def report(request):
    """``(cases, [[kernels the call added, its largest error relative to the reference],
    ...])``: as ``tn.linear`` routes them, and with the packed rows' GEMV for every group."""
    packed = request.param == "packed rows"
    out = run_python(CODE.replace("sys.argv[1]", repr(json.dumps(CASES))),
                     **({"PACKED_ROWS": "1"} if packed else {}))
    assert out.returncode == 0, out.stderr
    return (CASES if packed else ROUTED), json.loads(out.stdout)


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_a_gemv_compiles_only_its_path(report, case):
    cases, results = report
    added, error = results[case]
    assert added == ([] if cases[case][3] is None else [cases[case][3]])
    assert error < 1e-5
