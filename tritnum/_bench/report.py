"""The JSON file of ``python -m tritnum bench --json PATH``: its schema, writer and reader.

Schema (``schema_version`` 1); a key marked ``|null`` may hold ``null``::

    {
      "schema_version": 1,
      "created": "2026-01-31T12:00:00+00:00",      # UTC, ISO 8601
      "command": ["python", "-m", "tritnum", "bench", ...],
      "options": {"quick": bool, "device": str, "rows": int|null, "cols": int,
                  "families": [str, ...]},
      "machine": {"cpu": str, "isa": str,            # the SIMD level the kernels use
                  "isa_available": [str, ...],       # the levels this CPU has
                  "cores": int, "threads": int,      # os.cpu_count(), the kernels' threads
                  "platform": str, "gpu": str|null},
      "versions": {"tritnum": str, "python": str, "numpy": str, "numba": str,
                   "blas": str, "torch": str, "torchhd": str, "gguf": str},
                                                     # "not installed" where absent
      "load": {"before": [l1, l5, l15], "after": [l1, l5, l15],   # os.getloadavg()
               "contention": {"others": float, "steal": float, "load": float,
                              "cores": int, "noisy": bool}|null},
      "environment": {...},                          # ``python -m tritnum info``'s keys
      "results": [                                   # one per row of the printed table
        {"family": str, "name": str,
         "seconds": float, "baseline_name": str, "baseline_seconds": float,
         "speedup": float,                           # baseline_seconds / seconds
         "bar": float|null, "meets_bar": bool|null, "note": str,
         "params": {str: ...}},                      # what the row measures, see below
        ...]
    }

``params`` keys, by family (absent keys: the row does not have that quantity):

- matmul: ``op`` ("gemv" or "gemm"), ``rows`` (activation rows), ``out``, ``in``
  (the weight matrix is out x in), ``mode`` ("float", "int8", "q8_k"), ``threads``
  (int; null: the process's count), ``macs`` (multiply-adds per call),
  ``weight_bytes`` (packed), ``vs`` ("blas", "rate bar", "1 thread", "one scale",
  "int8"), ``scales`` ("per 256" or "one", where not one scale per tensor).
- vsa: ``op`` ("search", "bundle", "bind", "random", "centroid fit"), ``format``
  ("bitplane" or "dense"), ``d``, ``n`` (stored vectors or inputs), ``queries``,
  ``threads``, ``vs`` ("torchhd", "torch", "numpy").
- packing, quantize, gguf: ``op`` ("pack", "unpack", "convert", "quantize",
  "encode", "decode", "decode out="), ``format``, ``trits`` or ``values``, ``vs``.
- firstcall: ``op`` ("first call"), ``n`` (the matrices are n x n), ``calls`` (each
  first call's CPU seconds, by name), ``children`` (the fresh processes measured).

Adding keys is backwards compatible; renaming or removing one raises ``schema_version``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from .harness import Result

SCHEMA_VERSION = 1

_RESULT_TYPES: dict[str, tuple[type, ...]] = {
    "family": (str,), "name": (str,), "seconds": (int, float), "baseline_name": (str,),
    "baseline_seconds": (int, float), "speedup": (int, float),
    "bar": (int, float, type(None)), "meets_bar": (bool, type(None)), "note": (str,),
    "params": (dict,),
}
_TOP_TYPES: dict[str, type] = {
    "schema_version": int, "created": str, "command": list, "options": dict, "machine": dict,
    "versions": dict, "load": dict, "environment": dict, "results": list,
}
_MACHINE_KEYS = ("cpu", "isa", "isa_available", "cores", "threads", "platform", "gpu")
_VERSION_KEYS = ("tritnum", "python", "numpy", "numba", "blas", "torch", "torchhd", "gguf")


@dataclass(frozen=True)
class Report:
    """A whole bench file, validated: its rows and where and how they were measured."""

    schema_version: int
    created: str
    command: list[str]
    options: dict[str, Any]
    machine: dict[str, Any]
    versions: dict[str, str]
    load: dict[str, Any]
    environment: dict[str, Any]
    rows: list[Result]  # the rows as the harness made them


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def blas_name() -> str:
    """NumPy's BLAS: name and version, as NumPy's build configuration gives them."""
    import numpy as np

    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas['name']} {blas.get('version', '')}".strip()
    except Exception:  # older NumPy: no dicts mode
        return "unknown"


def machine(env: dict[str, Any], gpu: str | None = None) -> dict[str, Any]:
    """The ``machine`` object from ``environment()``'s dict."""
    from .._isa import ISA, available

    return {"cpu": env["cpu"], "isa": ISA, "isa_available": list(available()),
            "cores": os.cpu_count() or 1, "threads": env["threads"],
            "platform": platform.platform(), "gpu": gpu}


def versions(env: dict[str, Any]) -> dict[str, str]:
    """The ``versions`` object: tritnum, its dependencies and the baselines' libraries."""
    return {"tritnum": env["tritnum"], "python": env["python"], "numpy": env["numpy"],
            "numba": env["numba"], "blas": blas_name(), "torch": _version("torch"),
            "torchhd": _version("torch-hd"), "gguf": _version("gguf")}


def build(results: list[Result], env: dict[str, Any], load: dict[str, Any],
          options: dict[str, Any], gpu: str | None = None,
          command: list[str] | None = None) -> dict[str, Any]:
    """The JSON object of one run (schema above); ``load``: before, after, contention."""
    return {
        "schema_version": SCHEMA_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": _command() if command is None else list(command),
        "options": options,
        "machine": machine(env, gpu),
        "versions": versions(env),
        "load": load,
        "environment": env,
        "results": [asdict(r) for r in results],
    }


def _command() -> list[str]:
    """The command line of this process, ``python -m tritnum ...`` where run so."""
    if sys.argv and sys.argv[0].endswith(os.path.join("tritnum", "__main__.py")):
        return ["python", "-m", "tritnum", *sys.argv[1:]]
    return list(sys.argv)


def write(path: str | os.PathLike[str], report: dict[str, Any]) -> None:
    """Write ``report`` (from :func:`build`) as indented JSON, validated first."""
    parse(report, str(path))
    Path(path).write_text(json.dumps(report, indent=2) + "\n")


def load(path: str | os.PathLike[str]) -> Report:
    """Read and validate a bench file; a malformed one raises ValueError saying what is wrong."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    return parse(data, str(path))


def parse(data: Any, where: str = "bench report") -> Report:
    """Validate the decoded JSON ``data`` against the schema and return it typed."""
    def fail(what: str) -> ValueError:
        return ValueError(f"{where}: {what} (schema_version {SCHEMA_VERSION}, "
                          "see tritnum._bench.report)")

    if not isinstance(data, dict):
        raise fail(f"the top level is a {type(data).__name__}, not an object")
    if "schema_version" not in data:
        raise fail("no 'schema_version': not a bench file, or one from before the schema")
    version = data["schema_version"]
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise fail(f"schema_version {version!r} is not {SCHEMA_VERSION}")
    for key, kind in _TOP_TYPES.items():
        if key not in data:
            raise fail(f"no {key!r}")
        if not isinstance(data[key], kind):
            raise fail(f"{key!r} is a {type(data[key]).__name__}, not a {kind.__name__}")
    for key in _MACHINE_KEYS:
        if key not in data["machine"]:
            raise fail(f"machine has no {key!r}")
    for key in _VERSION_KEYS:
        if not isinstance(data["versions"].get(key), str):
            raise fail(f"versions has no {key!r} string")
    for key in ("before", "after"):
        loads = data["load"].get(key)
        if not (isinstance(loads, list) and len(loads) == 3
                and all(isinstance(v, (int, float)) for v in loads)):
            raise fail(f"load.{key} is not three load averages")
    if "contention" not in data["load"]:
        raise fail("load has no 'contention' (null where unknown)")
    rows = []
    for i, r in enumerate(data["results"]):
        if not isinstance(r, dict):
            raise fail(f"results[{i}] is not an object")
        for key, kinds in _RESULT_TYPES.items():
            if key not in r:
                raise fail(f"results[{i}] has no {key!r}")
            value = r[key]
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise fail(f"results[{i}].{key} is {value!r}, of the wrong type")
        if not (r["seconds"] > 0 and r["baseline_seconds"] > 0):
            raise fail(f"results[{i}] ({r['name']}): times must be positive")
        rows.append(Result(**{key: r[key] for key in _RESULT_TYPES}))
    return Report(version, data["created"], data["command"], data["options"], data["machine"],
                  data["versions"], data["load"], data["environment"], rows)
