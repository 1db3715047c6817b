"""``python -m tritnum bench --family hdc``: its data split and its rows without torch-hd."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("sklearn")

from tritnum._bench import hdc


def test_split_is_stratified_and_scaled():
    Xtr, Xte, ytr, yte = hdc.split("wine")
    assert len(Xtr) + len(Xte) == 178 and len(Xte) == 45
    assert Xtr.min() == -1 and Xtr.max() == 1
    # stratified: each class's share of the test rows is its share of all rows
    counts = np.bincount(np.concatenate([ytr, yte]))
    assert np.all(np.abs(np.bincount(yte) - counts * 45 / 178) <= 1)
    again = hdc.split("wine")
    assert np.array_equal(again[1], Xte)


def test_rows_say_when_torchhd_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchhd", None)  # import torchhd raises ImportError
    (row,) = hdc.hdc_results(quick=True)
    assert "torch-hd not installed" in row.note and row.bar is None
