"""What to install for an optional feature: one wording for every "missing package" message.

tritnum is installed from its source tree and is not on the package index, so a
hint naming tritnum's extras from the index would fail. The hints name the packages
each extra brings (those install anywhere) and, second, the extra itself from a
checkout.
"""

from __future__ import annotations

__all__ = ["EXTRAS", "missing"]

# extra -> (what it is, in a sentence; the pip requirements to name). Each requirement is
# one of the extra's own in setup.cfg (tests/test_extras.py checks it).
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "torch": ("PyTorch", ("torch",)),
    "safetensors": ("the safetensors package", ("safetensors",)),
    "dask": ("Dask", ("dask[array]",)),
    "demo": ("scikit-learn", ("scikit-learn",)),
    "cuda": ("numba-cuda", ("numba-cuda[cu13]",)),
    "bench": ("torch-hd", ("torch-hd",)),
    "test": ("hypothesis", ("hypothesis",)),
}


def _quoted(requirement: str) -> str:
    return f"'{requirement}'" if "[" in requirement else requirement


def install_hint(extra: str) -> str:
    """``pip install PACKAGES (or, from a tritnum checkout, pip install -e '.[EXTRA]')``."""
    _, packages = EXTRAS[extra]
    return (f"pip install {' '.join(_quoted(p) for p in packages)} "
            f"(or, from a tritnum checkout, pip install -e '.[{extra}]')")


def missing(what: str, extra: str) -> str:
    """The message for ``what`` (a feature) missing the packages of ``extra``.

    >>> print(missing("tritnum.torch", "torch"))
    tritnum.torch needs PyTorch: pip install torch (or, from a tritnum checkout, \
pip install -e '.[torch]')
    """
    needs, _ = EXTRAS[extra]
    return f"{what} needs {needs}: {install_hint(extra)}"
