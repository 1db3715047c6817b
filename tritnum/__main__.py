"""Command line: ``python -m tritnum {info,demo,bench,quantize-gguf}``."""

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


def _plain(doc: str | None) -> str:
    """A docstring as terminal text: reStructuredText's double backquotes dropped."""
    return (doc or "").replace("``", "")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the sub-command."""
    from . import __version__

    parser = argparse.ArgumentParser(prog="python -m tritnum", description=_plain(__doc__))
    parser.add_argument("--version", action="version", version=f"tritnum {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, devices, threads and kernel cache").set_defaults(
        func=_info)
    from ._demo import __doc__ as demo_doc
    from ._demo import add_arguments

    demo = sub.add_parser("demo", help="what tritnum does, on embedded data, in a minute",
                          description=_plain(demo_doc),
                          formatter_class=argparse.RawTextHelpFormatter)
    add_arguments(demo)
    demo.set_defaults(func=_demo)
    bench = sub.add_parser("bench", help="speed ratios against baselines, in one run")
    bench.add_argument("--quick", action="store_true", help="less data, 3 repeats")
    bench.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "numpy"])
    bench.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    bench.add_argument("--family", action="append",
                       choices=["packing", "quantize", "gguf", "matmul", "vsa", "dask",
                                "compress", "torch"],
                       help="only this family (repeatable; default: all)")
    bench.add_argument("--rows", type=int, default=None, help="rows of trits (default 4096)")
    bench.add_argument("--cols", type=int, default=16000, help="trits per row")
    bench.set_defaults(func=_bench)
    quantize = sub.add_parser(
        "quantize-gguf", help="quantize an F32/F16/BF16 GGUF model to TQ1_0, TQ2_0 or I2_S",
        description="Quantize a float GGUF model file to ternary as llama.cpp's llama-quantize "
                    "does (the same bytes; token embeddings, norms and the output layer stay "
                    "as they are), metadata kept, streamed tensor by tensor.")
    quantize.add_argument("src", help="the F32/F16/BF16 GGUF file")
    quantize.add_argument("dst", help="the GGUF file to write")
    quantize.add_argument("--qtype", default="TQ2_0", choices=["TQ1_0", "TQ2_0", "I2_S"])
    quantize.add_argument("--include", action="append", metavar="GLOB",
                          help="also quantize these tensors (e.g. output.weight; repeatable)")
    quantize.add_argument("--exclude", action="append", metavar="GLOB",
                          help="keep these tensors as they are (repeatable)")
    quantize.add_argument("--layout", default="x86", choices=["x86", "x86-interleaved", "arm"],
                          help="I2_S byte layout: the bitnet.cpp build that reads the file")
    quantize.add_argument("--no-progress", action="store_true", help="no progress bar")
    quantize.set_defaults(func=_quantize_gguf)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
