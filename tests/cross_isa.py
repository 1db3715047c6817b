"""Compile the CPU kernels for a CPU this machine may lack, and read their instructions.

numba compiles for the CPU that ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` name, and
``TRITNUM_ISA`` picks the SIMD level; a kernel compiled for a level the host lacks must
never run here (an AVX-512 kernel on an AVX2 host dies of SIGILL). So a child process,
this file run as ``compile OUTDIR [aarch64]`` in a target's environment
(:func:`target_env`), runs :data:`WORKLOAD` through the public API with every tritnum
kernel call replaced by its compilation for the arguments' types: no kernel runs, each
returns zeros of its result type and leaves its outputs zero (the workload's answers are
wrong; its kernels and their signatures are the level's). It writes each compiled
kernel's assembly; with ``aarch64`` (the portable level), tritnum's Python code sees an
ARM machine (its spin-waits pick their IR by it) and each kernel's LLVM IR is also
lowered for AArch64 CPUs by :func:`retarget` (in the child: LLVM aborts the process on
IR it cannot lower).

:func:`compile_levels` runs it for every level from a test; :func:`inner_loops`,
:func:`mnemonic` and :func:`vector_width` read the assembly.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the x86 CPU each level is compiled for: an x86-64 psABI level (its features are fixed,
# whatever LLVM's idea of a named CPU) plus the level's own features, so that nothing past
# what the level may assume is there: portable on the x86-64 baseline (SSE2), AVX2 and
# AVX-VNNI on x86-64-v3 (Haswell, Alder Lake: no AVX-512), AVX-512 VNNI on x86-64-v4
X86_CPUS = {"portable": "x86-64", "avx2": "x86-64-v3", "avxvnni": "x86-64-v3",
            "avx512vnni": "x86-64-v4"}
# features the kernels look for beyond the level's (vsa_search's vpopcntq; GFNI, which the
# GEMV of weights in scale groups on laid-out rows needs), as AVX-512 CPUs since Ice Lake
# and Zen 4 have them
EXTRA_FEATURES = {"avx512vnni": ("avx512vpopcntdq", "gfni")}
AARCH64 = "aarch64-unknown-linux-gnu"
AARCH64_CPUS = ("generic", "neoverse-n1")  # Armv8.0 NEON; Graviton 2 (dot product)

# what the child runs: every kernel family, on tn.warmup's shapes
WORKLOAD = "import tritnum as tn; tn.warmup('cpu')"


def target_env(level: str) -> dict[str, str]:
    """This environment, set to compile ``level``'s kernels for its x86 CPU (cache off)."""
    from tritnum import _isa

    env = {k: v for k, v in os.environ.items()  # the kernels as shipped, on the CPU
           if k not in ("NUMBA_ENABLE_CUDASIM", "NUMBA_BOUNDSCHECK")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    features = sorted(_isa.REQUIRES[level] | set(EXTRA_FEATURES.get(level, ())))
    # numba adds the host's features to a named CPU unless given some: portable gets SSE2
    return {**env, "NUMBA_CPU_NAME": X86_CPUS[level],
            "NUMBA_CPU_FEATURES": ",".join(f"+{f}" for f in features or ["sse2"]),
            "TRITNUM_ISA": level, "TRITNUM_CACHE": "0"}


def compile_levels(root: Path) -> dict[str, dict[str, list[dict[str, str]]]]:
    """Compile the kernels :data:`WORKLOAD` calls for each level's CPU, running none of them.

    One child process a level, all at once (each compiles on one core). Returns
    ``{level: {"module:function": [{"signature": ..., "asm": ...}, ...]}}`` (the texts); the
    portable level's entries also hold the assembly for each of :data:`AARCH64_CPUS`.
    """
    from tritnum import _isa

    children = {}
    for level in _isa.LEVELS:
        (root / level).mkdir()
        args = ["compile", str(root / level), *(["aarch64"] if level == "portable" else [])]
        with open(root / level / "stderr.txt", "w") as stderr:
            children[level] = subprocess.Popen([sys.executable, __file__, *args],
                                               env=target_env(level), stderr=stderr)
    for level, child in children.items():
        child.wait(timeout=1800)
        stderr = (root / level / "stderr.txt").read_text()
        assert child.returncode == 0, f"{level}:\n{stderr[-4000:]}"
    return {level: _read(root / level) for level in children}


def _read(outdir: Path) -> dict[str, list[dict[str, str]]]:
    manifest = json.loads((outdir / "manifest.json").read_text())
    return {key: [{name: (value if name == "signature" else (outdir / value).read_text())
                   for name, value in entry.items()} for entry in entries]
            for key, entries in manifest.items()}


def retarget(ir_text: str, cpu: str, triple: str = AARCH64) -> str:
    """Assembly of the LLVM IR ``ir_text`` lowered for ``cpu`` of ``triple``."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    machine = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, opt=3)
    module = llvm.parse_assembly(ir_text)
    module.triple = triple
    module.data_layout = str(machine.target_data)
    module.verify()
    return machine.emit_assembly(module)


_COMMENT = re.compile(r"(^|\s)(#\s|//).*$")  # x86 '# ...', AArch64 '// ...' (not '#1')
_LABEL = re.compile(r"^(\.?L[\w.$]+):")
_BRANCH = re.compile(r"^\s+(j\w+|b(?:\.\w+)?|cbn?z|tbn?z)\s+(?:[^,]+,\s*)*(\.?L[\w.$]+)\s*$")


def inner_loops(asm: str) -> list[list[str]]:
    """The instructions of each innermost loop of ``asm`` (x86 or AArch64, LLVM's syntax).

    A loop is the text from a label to a later branch back to it (LLVM mostly lays a
    loop's blocks out together, though a span may hold a block of code around the loop);
    innermost: no other loop inside it. Each instruction is a line stripped, its comment
    dropped.
    """
    lines = [_COMMENT.sub("", line).rstrip() for line in asm.splitlines()]
    labels: dict[str, int] = {}
    spans = []
    for i, line in enumerate(lines):
        if m := _LABEL.match(line):
            labels[m.group(1)] = i
        elif (m := _BRANCH.match(line)) and m.group(2) in labels:
            spans.append((labels[m.group(2)], i))
    inner = [s for s in spans if not any(s[0] <= t[0] and t[1] <= s[1] and t != s for t in spans)]
    return [[lines[j].strip() for j in range(a + 1, b + 1)
             if lines[j].strip() and not lines[j].strip().startswith(".")
             and not _LABEL.match(lines[j])] for a, b in inner]


def mnemonic(instruction: str) -> str:
    """``vpdpbusd`` of ``{vex} vpdpbusd %ymm1, %ymm2, %ymm3``."""
    return re.sub(r"^\{\w+\}\s*", "", instruction).split()[0]


def vector_width(instruction: str) -> int:
    """Bits of the widest vector register ``instruction`` names (0: none, a scalar one)."""
    widths = [{"x": 128, "y": 256, "z": 512}[r] for r in re.findall(r"%([xyz])mm\d", instruction)]
    if re.search(r"\bv\d+\.(16b|8h|4s|2d)\b|\bq\d+\b", instruction):  # AArch64 NEON
        widths.append(128)
    if re.search(r"\bv\d+\.(8b|4h|2s|1d)\b", instruction):
        widths.append(64)
    return max(widths, default=0)


def _dispatchers(module):
    from numba.core.registry import CPUDispatcher

    def own(value):
        return isinstance(value, CPUDispatcher) and value.py_func.__module__ == module.__name__

    for name, value in vars(module).items():
        if own(value):
            yield name, value
        elif isinstance(value, dict):  # kernels a size or format each (the GEMV's groups)
            yield from ((f"{name}[{key}]", k) for key, k in value.items() if own(k))


def _zeros(ty):
    """A zero of the numba type ``ty`` (what a kernel that is not run returns)."""
    import numpy as np
    from numba.core import types
    from numba.np import numpy_support

    if isinstance(ty, types.BaseTuple):
        return tuple(_zeros(t) for t in ty)
    if isinstance(ty, types.NoneType):
        return None
    if isinstance(ty, types.Boolean):
        return False
    if isinstance(ty, types.Float):
        return 0.0
    if isinstance(ty, types.Integer):
        return 0
    if isinstance(ty, types.Array):  # one zero, broadcasting like any array of its rank
        return np.zeros((1,) * ty.ndim, numpy_support.as_dtype(ty.dtype))
    raise TypeError(f"no zero of {ty} for a kernel that is not run")


def _compile_only(kernel, *args, **kwargs):
    """A tritnum kernel call: compiled for the target CPU, never run.

    Arguments are bound as numba's dispatcher binds them (defaults left out are
    ``Omitted``) and typed as it types them.
    """
    import inspect

    from numba.core import types
    from numba.core.dispatcher import OmittedArg

    bound = inspect.signature(kernel.py_func).bind(*args, **kwargs)
    given = set(bound.arguments)
    bound.apply_defaults()
    folded = [value if name in given else OmittedArg(value)
              for name, value in bound.arguments.items()]
    kernel._compile_for_args(*folded)
    sig = tuple(types.Omitted(a.value) if isinstance(a, OmittedArg) else kernel.typeof_pyval(a)
                for a in folded)
    return _zeros(kernel.overloads[sig].signature.return_type)


def _spin_not_run(flags, value, ticks, rounds, settle, ready, yield_every, words, slot, word):
    """``_parallel._spin`` not run: its first store (the pool's Python code counts on it),
    then as if its time ran out."""
    words[slot] = word
    return 0


def _idle_not_run(generation, seen, ticks, rounds, settle, ready, yield_every, inside, slot,
                  *rest):
    """``_parallel._idle`` not run: its first store, then as if no call came since ``seen``.

    (Zeros would return a generation 0 that it never sees again: its helper would spin in
    Python, holding the GIL, for the rest of the run.)
    """
    inside[slot] = 0
    return False, seen


# the thread pool's waits: their helpers sleep until a call comes, as they do when run
POOL_WAITS = {"_spin": _spin_not_run, "_idle": _idle_not_run}


def _keep_ir_before_codegen() -> None:
    """Keep each compiled library's optimized IR as ``ir_before_codegen``.

    numba's ``inspect_llvm`` shows the module after the JIT lowered it for this host,
    whose codegen passes leave x86 intrinsics in it (``llvm.x86.atomic.sub.cc``), and
    links those lowered modules into their callers': a copy taken before is linked
    instead.
    """
    from numba.core.codegen import CPUCodeLibrary

    finalize = CPUCodeLibrary._finalize_final_module
    for_linking = CPUCodeLibrary._get_module_for_linking

    def keep(library):
        library.before_codegen = library._final_module.clone()
        library.ir_before_codegen = str(library.before_codegen)
        finalize(library)

    def link_kept(library):
        kept = getattr(library, "before_codegen", None)
        if kept is None or library._shared_module is not None:
            return for_linking(library)
        lowered, library._final_module = library._final_module, kept
        try:
            return for_linking(library)
        finally:
            library._final_module = lowered

    CPUCodeLibrary._finalize_final_module = keep
    CPUCodeLibrary._get_module_for_linking = link_kept


def _compile(outdir: str, machine: str | None = None) -> None:
    import numpy as np
    from numba.core.registry import CPUDispatcher

    if machine:  # tritnum's Python code as it runs there
        import platform
        platform.machine = lambda: machine
        _keep_ir_before_codegen()
    from tritnum import _isa

    assert _isa.ISA == os.environ["TRITNUM_ISA"], (_isa.ISA, _isa.target_features())
    call = CPUDispatcher.__call__

    def intercept(kernel, *args, **kwargs):
        if not kernel.py_func.__module__.startswith("tritnum."):
            return call(kernel, *args, **kwargs)
        result = _compile_only(kernel, *args, **kwargs)
        wait = POOL_WAITS.get(kernel.py_func.__qualname__)
        if wait is not None and kernel.py_func.__module__.endswith("._parallel"):
            return wait(*args)
        return result

    CPUDispatcher.__call__ = intercept
    # the outputs that kernels would have filled read as zeros (not as what np.empty left
    # there, which the Python code around the kernels may refuse, a scale overflowing)
    np.empty, np.empty_like = np.zeros, np.zeros_like
    exec(WORKLOAD, {})
    out = Path(outdir)
    manifest: dict[str, list[dict[str, str]]] = {}
    for modname, module in list(sys.modules.items()):
        if not modname.startswith("tritnum.") or module is None:
            continue
        for name, kernel in _dispatchers(module):
            for i, sig in enumerate(kernel.signatures):
                key = f"{modname}:{name}"
                entry = {"signature": str(sig), "asm": f"{key}.{i}.s"}
                if machine:
                    ir_text = kernel.overloads[sig].library.ir_before_codegen
                    for cpu in AARCH64_CPUS:
                        entry[cpu] = f"{key}.{i}.{cpu}.s"
                        (out / entry[cpu]).write_text(retarget(ir_text, cpu))
                (out / entry["asm"]).write_text(kernel.inspect_asm(sig))
                manifest.setdefault(key, []).append(entry)
    (out / "manifest.json").write_text(json.dumps(manifest))


if __name__ == "__main__":
    if sys.argv[1] != "compile":
        sys.exit(__doc__)
    _compile(*sys.argv[2:])
