"""The packed formats of docs/formats.md: names, storage units and buffer shapes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validate import choice
from .errors import FormatError

__all__ = ["FORMATS", "Format", "get_format"]


@dataclass(frozen=True)
class Format:
    """One packed format: ``per_unit`` trits go into one storage unit of ``dtype``."""

    name: str
    code: int  # the integer the kernels branch on
    per_unit: int
    dtype: np.dtype
    planes: int  # 2 for "bitplane" (plus, minus), else 1

    def units(self, n: int) -> int:
        """Storage units of a row of ``n`` trits (each row is padded on its own)."""
        return -(-n // self.per_unit)

    def data_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of the packed buffer for a logical ``shape`` packed along the last axis."""
        shape = tuple(shape)  # the CUDA simulator's shapes refuse negative indices
        units = self.units(shape[-1])
        return (*shape[:-1], 2, units) if self.planes == 2 else (*shape[:-1], units)

    def bits_per_trit(self) -> float:
        """Storage bits per trit for long rows."""
        return 8 * self.dtype.itemsize * self.planes / self.per_unit


FORMATS: dict[str, Format] = {
    "2bit": Format("2bit", 0, 4, np.dtype(np.uint8), 1),
    "base3": Format("base3", 1, 5, np.dtype(np.uint8), 1),
    "bitplane": Format("bitplane", 2, 64, np.dtype(np.uint64), 2),
}


def get_format(name: object) -> Format:
    """The :class:`Format` called ``name``; :class:`FormatError` listing the valid ones."""
    return FORMATS[choice(name, "format", FORMATS, FormatError)]
