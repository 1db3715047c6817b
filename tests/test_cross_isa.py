"""Every SIMD level's kernels compiled for a CPU of that level, whatever this host has,
and the instructions of their hot loops read from the assembly (issue 28, item 14).

No kernel compiled here runs (an AVX-512 kernel on an AVX2 host dies of SIGILL): a child
process (``cross_isa``) runs ``tn.warmup`` with each kernel call replaced by its
compilation for a target CPU. x86: the portable level on the x86-64 baseline (SSE2),
AVX2 and AVX-VNNI on x86-64-v3 (no AVX-512), AVX-512 VNNI on x86-64-v4; the portable
level's IR, as tritnum's Python code writes it on an ARM machine, is also lowered for
AArch64 CPUs. Minutes of compilation, a child process a level, all at once: slow.
"""

import importlib
import pkgutil
from collections import Counter

import pytest
from cross_isa import AARCH64_CPUS, compile_levels, inner_loops, mnemonic, vector_width

from tritnum import _isa

# the int8 dot and float trit instructions of the 2bit GEMV's hot loops, and their bits
GEMV = {
    "portable": {"int8": ("pmullw", 128), "float": ("cvtdq2ps", 128)},
    "avx2": {"int8": ("vpmaddubsw", 256), "float": ("vpermilps", 256)},
    "avxvnni": {"int8": ("vpdpbusd", 256), "float": ("vpermilps", 256)},
    "avx512vnni": {"int8": ("vpdpbusd", 512), "float": ("vpermilps", 512)},
}
AARCH64_GEMV = {"int8": ("smlal", 128), "float": ("fmla", 128)}
# what a vector operation split into scalar ones leaves in a loop: bytes moved one at a
# time, between vector and general registers or through memory, and scalar float math
# (multiplies by an index, imul or madd, are address arithmetic)
SCALAR = {"movzbl", "movsbl", "movzbq", "movsbq", "pinsrb", "pextrb", "vpinsrb", "vpextrb",
          "cvtsi2ss", "vcvtsi2ss", "mulss", "vmulss",  # x86
          "ldrb", "ldrsb", "strb", "umov", "smov", "fmadd"}  # AArch64
# the instructions beyond the GEMV that show each kernel family uses its level, in bits
FAMILIES = {
    "avx512vnni": {"int8_gemm": ("vpdpbusd", 512), "q8k": ("vpdpbusd", 512),
                   "q8k_gemm": ("vpdpbusd", 512), "vsa_search": ("vpopcntq", 512)},
    "avxvnni": {"int8_gemm": ("vpdpbusd", 256), "q8k": ("vpdpbusd", 256),
                "q8k_gemm": ("vpdpbusd", 256), "vsa_search": ("vpshufb", 256)},
    "avx2": {"int8_gemm": ("vpmaddubsw", 256), "q8k": ("vpmaddubsw", 256),
             "q8k_gemm": ("vpmaddubsw", 256), "vsa_search": ("vpshufb", 256)},
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """``{level: {kernel: [{"signature", "asm", ...}]}}``, compiled once a module."""
    return compile_levels(tmp_path_factory.mktemp("levels"))


def _gemv_loops(kernels, activations, asm="asm"):
    """The innermost loops of the 2bit GEMV's path kernels for int8 or float32 activations."""
    dtype = {"int8": "int8", "float": "float32"}[activations]
    entries = [e for key, found in kernels.items()
               if key.startswith("tritnum._kernels.cpu.matmul:_gemv_") for e in found
               if e["signature"].startswith(f"(Array({dtype}, ")]
    assert entries, f"no {activations} GEMV compiled"
    return [loop for e in entries for loop in inner_loops(e[asm])]


def _check_hot_loops(loops, instruction, bits, *, only_width=True):
    """``instruction`` on ``bits``-bit vectors in an innermost loop with no scalar code
    (and, with ``only_width``, on no other width anywhere in the loops).

    Some loops that hold it also hold the copy of a partial block (LLVM's block layout
    on AArch64 puts it inside the loop's span): one clean loop is asked for.
    """
    widths = {vector_width(i) for loop in loops for i in loop if mnemonic(i) == instruction}
    assert bits in widths, f"no innermost loop uses {instruction} on {bits} bits ({widths})"
    assert widths == {bits} or not only_width, (instruction, widths)
    hot = [loop for loop in loops
           if any(mnemonic(i) == instruction and vector_width(i) == bits for i in loop)]
    fallback = [sorted({mnemonic(i) for i in loop} & SCALAR) for loop in hot]
    assert [] in fallback, f"scalar code beside {instruction} in every loop: {fallback}"


@pytest.mark.slow
@pytest.mark.parametrize("activations", ["int8", "float"])
@pytest.mark.parametrize("level", _isa.LEVELS)
def test_gemv_hot_loops(compiled, level, activations):
    _check_hot_loops(_gemv_loops(compiled[level], activations), *GEMV[level][activations])


@pytest.mark.slow
@pytest.mark.parametrize("activations", ["int8", "float"])
@pytest.mark.parametrize("cpu", AARCH64_CPUS)
def test_gemv_hot_loops_aarch64(compiled, cpu, activations):
    _check_hot_loops(_gemv_loops(compiled["portable"], activations, cpu),
                     *AARCH64_GEMV[activations])


@pytest.mark.slow
@pytest.mark.parametrize("cpu", AARCH64_CPUS)
def test_search_counts_bits_with_neon(compiled, cpu):
    loops = [loop for key, entries in compiled["portable"].items()
             if key.startswith("tritnum._kernels.cpu.vsa_search:")
             for e in entries for loop in inner_loops(e[cpu])]
    _check_hot_loops(loops, "cnt", 128, only_width=False)  # cnt v.8b: a word's tail


@pytest.mark.slow
@pytest.mark.parametrize("level", [lv for lv in _isa.LEVELS if lv in FAMILIES])
def test_kernel_families_use_their_level(compiled, level):
    seen = Counter()
    for key, entries in compiled[level].items():
        family = key.split(":")[0].rsplit(".", 1)[1]
        for e in entries:
            for loop in inner_loops(e["asm"]):
                seen.update((family, mnemonic(i), vector_width(i)) for i in loop)
    for family, (instruction, bits) in FAMILIES[level].items():
        assert seen[family, instruction, bits], f"{family}: no {instruction} on {bits} bits"


@pytest.mark.slow
@pytest.mark.parametrize("level", _isa.LEVELS)
def test_nothing_past_the_level(compiled, level):
    """No instruction the level's CPU lacks: no AVX at portable, no AVX-512 below its level
    (what holds the harness to its target, for the checks above)."""
    widest = {"portable": 128, "avx2": 256, "avxvnni": 256, "avx512vnni": 512}[level]
    for key, entries in compiled[level].items():
        for e in entries:
            lines = e["asm"].splitlines()
            assert max(map(vector_width, lines)) <= widest, key
            if widest < 512:
                assert not any("%k" in line for line in lines), key  # AVX-512 mask registers


@pytest.mark.slow
def test_every_kernel_compiles_at_some_level(compiled):
    """The workload reaches every CPU kernel (helpers inlined into them aside)."""
    from numba.core.registry import CPUDispatcher

    import tritnum._kernels.cpu as cpu

    every = set()
    for info in pkgutil.walk_packages(cpu.__path__, f"{cpu.__name__}."):
        module = importlib.import_module(info.name)
        every |= {f"{info.name}:{name}" for name, v in vars(module).items()
                  if isinstance(v, CPUDispatcher) and v.py_func.__module__ == info.name
                  and v.targetoptions.get("inline") != "always"}
    reached = set().union(*compiled.values())
    assert every <= reached, sorted(every - reached)


X86_ASM = """\
f:
\tmovq\t%rdi, %rax
.LBB0_1:
\tvpdpbusd\t(%rax), %zmm1, %zmm0
.LBB0_2:
\tvpaddd\t%ymm2, %ymm3, %ymm3
\taddq\t$64, %rax
\tjne\t.LBB0_2
\tdecq\t%rcx
\tjne\t.LBB0_1
\t{vex} vpdpbusd\t%ymm1, %ymm2, %ymm3 # a comment
\tretq
"""
AARCH64_ASM = """\
f:
.LBB0_1: // loop
\tsmlal\tv0.4s, v1.4h, v2.4h
\tldrb\tw8, [x0], #1
\tsubs\tx1, x1, #1
\tb.ne\t.LBB0_1
\tret
"""


def test_reading_the_assembly():
    x86 = inner_loops(X86_ASM)
    assert x86 == [["vpaddd\t%ymm2, %ymm3, %ymm3", "addq\t$64, %rax", "jne\t.LBB0_2"]]
    assert [vector_width(i) for i in X86_ASM.splitlines()[3:5]] == [512, 0]
    assert mnemonic(X86_ASM.splitlines()[-2].strip()) == "vpdpbusd"
    assert vector_width(X86_ASM.splitlines()[-2]) == 256
    [arm] = inner_loops(AARCH64_ASM)
    assert [mnemonic(i) for i in arm] == ["smlal", "ldrb", "subs", "b.ne"]
    assert [vector_width(i) for i in arm] == [128, 0, 0, 0]
    with pytest.raises(AssertionError, match="scalar code beside smlal in every loop"):
        _check_hot_loops([arm], "smlal", 128)
    with pytest.raises(AssertionError, match="no innermost loop uses sdot on 128 bits"):
        _check_hot_loops([arm], "sdot", 128)
