"""Command line of tritnum, ternary numerics for NumPy: ``python -m tritnum COMMAND``.

Commands: ``info`` (versions, CPU, GPU, threads), ``demo`` (what tritnum does, in a
minute), ``bench`` (speed against baselines), ``quantize-gguf`` (a float GGUF model to
ternary), ``convert`` (Hugging Face bitnet checkpoints, tritnum's files, GGUF).
``python -m tritnum COMMAND --help`` tells more about each.
"""

from __future__ import annotations

import argparse
import sys

from ._environment import environment


def _info(args: argparse.Namespace) -> int:
    for key, value in environment().items():
        print(f"{key:>16}: {value}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ._demo import main

    return main(args)


def _bench(args: argparse.Namespace) -> int:
    from ._bench import main

    return main(args)


def _quantize_gguf(args: argparse.Namespace) -> int:
    from .errors import TritnumError
    from .io import quantize_gguf

    try:
        report = quantize_gguf(args.src, args.dst, args.qtype, include=args.include,
                               exclude=args.exclude, layout=args.layout,
                               progress=False if args.no_progress else None)
    except (TritnumError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report)
    return 0


def _convert(args: argparse.Namespace) -> int:
    from .errors import TritnumError
    from .io import convert

    try:
        report = convert(args.src, args.dst, config=args.config, qtype=args.qtype,
                         layout=args.layout, linear_class=args.linear_class,
                         scale_dtype=args.scale_dtype, max_shard_size=args.max_shard_size,
                         requantize=args.requantize,
                         tokenizer=False if args.no_tokenizer else args.tokenizer or True,
                         progress=False if args.no_progress else None)
    except (TritnumError, OSError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report if report is not None else f"wrote {args.dst}")
    return 0


DOCS = """\
documentation:
  docs/ in the source tree (user guide, API reference); to build the HTML pages:
    pip install -e ".[docs,torch,dask]" && sphinx-build docs docs/_build/html
  in Python: help(tritnum.linear), help(tritnum.quantize), ... for any tritnum.<name>,
  or from a shell: python -m pydoc tritnum.linear"""

INFO = """\
Print what tritnum runs on, one line each: the versions of tritnum, Python, NumPy,
numba and numba-cuda; the CPU, its cores and the SIMD level the kernels use; numba's
threads and threading layer; whether a CUDA GPU is usable (or numba's simulator is on);
the default device; and whether compiled kernels are cached, and where. Paste it into
bug reports."""

BENCH = """\
Time tritnum's operations against baselines on this machine, in one run: packing
against np.packbits, quantization and GGUF blocks against the NumPy reference and the
gguf package, ternary matmul against BLAS float32, VSA against NumPy and torch-hd, and
more, by family. Each row is the median time of tritnum and of its baseline, measured
in the same process, and the speedup (baseline time / tritnum time); "bar" is the
speedup the project asks for on 2 CPU cores (no bars with --quick). A line says how
busy the machine was while measuring; progress goes to stderr. Where a baseline's or
a family's package is missing (Dask, PyTorch, torch-hd), its rows say so."""

QUANTIZE_GGUF = """\
Quantize a float GGUF model file to ternary as llama.cpp's llama-quantize does (the
same bytes; token embeddings, norms and the output layer stay as they are), metadata
kept, streamed tensor by tensor. llama.cpp reads TQ1_0 and TQ2_0, bitnet.cpp reads
I2_S. Prints what it quantized and what it kept."""

CONVERT = """\
Convert a ternary model between a Hugging Face transformers bitnet model directory
(config.json, model.safetensors or shards; microsoft/bitnet-b1.58-2B-4T's format),
tritnum's own .safetensors or .npz file, and a GGUF file (TQ2_0, TQ1_0; I2_S for
bitnet.cpp), written tensor by tensor: llama.cpp's llama architecture for a Llama
(model_type "llama"), its bitnet for a BitNet with SiLU, bitnet.cpp's bitnet-b1.58 for
one with relu2 (transformers' default, 2B-4T's). The formats follow from the paths:
a directory is a Hugging Face model, the extension names a file's format. Trits are
exact every way; a scale the target cannot hold exactly is an error unless
--requantize. A tritnum .safetensors keeps the model's config; an .npz needs
--config to go further."""


def _plain(doc: str | None) -> str:
    """A docstring as terminal text: reStructuredText's double backquotes dropped."""
    return (doc or "").replace("``", "")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the sub-command."""
    from . import __version__

    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="python -m tritnum", description=_plain(__doc__),
                                     epilog=DOCS, formatter_class=raw)
    parser.add_argument("--version", action="version", version=f"tritnum {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("info", help="versions, CPU, GPU, threads and kernel cache",
                   description=INFO, epilog=DOCS, formatter_class=raw).set_defaults(func=_info)
    from ._demo import __doc__ as demo_doc
    from ._demo import add_arguments

    demo = sub.add_parser("demo", help="what tritnum does, on embedded data, in a minute",
                          description=_plain(demo_doc), epilog=DOCS,
                          formatter_class=argparse.RawTextHelpFormatter)
    add_arguments(demo)
    demo.set_defaults(func=_demo)
    bench = sub.add_parser("bench", help="speed against baselines (NumPy, BLAS, torch-hd, ...)",
                           description=BENCH, epilog=DOCS, formatter_class=raw)
    bench.add_argument("--quick", action="store_true",
                       help="a quick check: less data, 3 repeats in one round, no warm-up "
                            "time and no bars (they are set for the full sizes)")
    bench.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "numpy"],
                       help="where tritnum runs: auto (the default device; the CPU kernels "
                            "for NumPy data), cpu (numba kernels), cuda (the GPU, named in the "
                            "output), numpy (the reference implementation) (default: auto)")
    bench.add_argument("--json", metavar="PATH",
                       help="also write the run to PATH as JSON: the machine (CPU, SIMD, "
                            "cores, threads, GPU), the versions, the load while measuring, "
                            "the options and every row of the table (times, baseline, "
                            "speedup, bar, what the row measures)")
    bench.add_argument("--family", action="append",
                       choices=["packing", "quantize", "gguf", "matmul", "vsa", "dask",
                                "compress", "torch", "sweep", "hdc", "firstcall", "gpu"],
                       help="only this family of rows (repeatable; default: all but sweep, "
                            "every public op over its modes against NumPy, about 10 "
                            "minutes, a minute with --quick, run only when named; "
                            "hdc, HDC classifiers against torch-hd's, accuracy and "
                            "time, about 5 minutes, 1 with --quick, only when named; "
                            "firstcall, what a fresh process with an empty cache compiles "
                            "for its first quantize and linear calls, against numba's "
                            "first trivial function, about 2 minutes, only when named; and "
                            "gpu, with --device cuda, the rows of the GPU's bars: GEMV "
                            "beyond the L2 cache, a steady call's host time, the int8 "
                            "GEMM against cuBLAS int8, a search's result on the host)")
    bench.add_argument("--rows", type=int, default=None,
                       help="rows of trits in the packing and quantize cases (default 4096; "
                            "1024 with --quick)")
    bench.add_argument("--cols", type=int, default=16000,
                       help="trits per row in those cases (default 16000)")
    bench.set_defaults(func=_bench)
    quantize = sub.add_parser(
        "quantize-gguf", help="quantize an F32/F16/BF16 GGUF model to TQ1_0, TQ2_0 or I2_S",
        description=QUANTIZE_GGUF, epilog=DOCS, formatter_class=raw)
    quantize.add_argument("src", help="the F32/F16/BF16 GGUF file")
    quantize.add_argument("dst", help="the GGUF file to write")
    quantize.add_argument("--qtype", default="TQ2_0", choices=["TQ1_0", "TQ2_0", "I2_S"],
                          help="the ternary type: TQ2_0 (2.06 bits/weight, default), TQ1_0 "
                               "(1.69), I2_S (2, one scale per tensor)")
    quantize.add_argument("--include", action="append", metavar="GLOB",
                          help="also quantize these tensors (e.g. output.weight; repeatable)")
    quantize.add_argument("--exclude", action="append", metavar="GLOB",
                          help="keep these tensors as they are (repeatable)")
    quantize.add_argument("--layout", default="x86", choices=["x86", "x86-interleaved", "arm"],
                          help="I2_S byte layout: the bitnet.cpp build that reads the file")
    quantize.add_argument("--no-progress", action="store_true", help="no progress bar")
    quantize.set_defaults(func=_quantize_gguf)
    conv = sub.add_parser(
        "convert", help="Hugging Face bitnet <-> tritnum .safetensors/.npz, bitnet -> GGUF",
        description=CONVERT, epilog=DOCS, formatter_class=raw)
    conv.add_argument("src", help="a Hugging Face model directory, or tritnum's "
                                  ".safetensors/.npz file")
    conv.add_argument("dst", help="a new directory, or a .safetensors, .npz or .gguf file")
    conv.add_argument("--config", metavar="PATH",
                      help="the model's config.json (or its directory), for a tritnum source")
    conv.add_argument("--qtype", default="TQ2_0", choices=["TQ1_0", "TQ2_0", "I2_S"],
                      help="the projections' GGUF type (default TQ2_0)")
    conv.add_argument("--layout", default="x86", choices=["x86", "x86-interleaved", "arm"],
                      help="I2_S byte layout: the bitnet.cpp build that reads the file")
    conv.add_argument("--linear-class", choices=["bitlinear", "autobitlinear"],
                      help="the scale convention of a Hugging Face directory written "
                           "(default: the config's)")
    conv.add_argument("--scale-dtype", choices=["bfloat16", "float16", "float32"],
                      help="the weight_scale dtype of a Hugging Face directory written "
                           "(default: the config's dtype)")
    conv.add_argument("--max-shard-size", type=int, metavar="BYTES",
                      help="shard a Hugging Face directory written into files of this size")
    conv.add_argument("--requantize", action="store_true",
                      help="round scales the target cannot hold exactly")
    vocab = conv.add_mutually_exclusive_group()
    vocab.add_argument("--tokenizer", metavar="DIR",
                       help="GGUF: the directory whose tokenizer.json the file takes "
                            "(default: the source directory's, or the --config one's)")
    vocab.add_argument("--no-tokenizer", action="store_true",
                       help="GGUF: write no tokenizer (llama.cpp then cannot run it on text)")
    conv.add_argument("--no-progress", action="store_true", help="no progress bar")
    conv.set_defaults(func=_convert)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
