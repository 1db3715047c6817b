"""Classification of hypervectors: a centroid (prototype) classifier."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .._dispatch import call
from .._interop import to_host
from ..errors import ShapeMismatchError
from ._hv import BITPLANE, Hypervectors, count, hypervectors, resolve

__all__ = ["Centroid"]


class Centroid:
    """A centroid (prototype) classifier on hypervectors, with optional retraining.

    ``fit`` adds up the hypervectors of each class into an integer prototype;
    ``predict`` picks the class whose prototype has the largest cosine with the
    sample. ``epochs`` rounds of retraining then move misclassified training
    samples from the prototype they were given to toward their own class
    (the perceptron-style refinement common in hyperdimensional computing).

    Parameters
    ----------
    epochs : int
        Retraining rounds after the first pass (0: plain centroids).
    device : {"auto", "cpu", "cuda", "numpy"}
        Where samples are checked and bit planes unpacked; the prototypes are
        float64 NumPy arrays, and scoring runs on them in NumPy.

    Attributes
    ----------
    classes_ : numpy.ndarray
        The class labels, sorted.
    sums_ : numpy.ndarray
        ``(n_classes, d)`` float64 prototypes (integer valued).

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> protos = tn.vsa.random(3, 2000, seed=1)
    >>> y = np.repeat([0, 1, 2], 20)
    >>> X = tn.vsa.bundle(np.stack([protos[y], tn.vsa.random(60, 2000, seed=2)]))
    >>> clf = tn.vsa.Centroid().fit(X, y)
    >>> clf.predict(protos), clf.score(X, y)
    (array([0, 1, 2]), 1.0)
    """

    def __init__(self, *, epochs: int = 0, device: str = "auto") -> None:
        self.epochs = count(epochs, "epochs")
        self.device = device
        self.classes_: np.ndarray = np.empty(0, np.int64)
        self.sums_: np.ndarray | None = None

    def _dense(self, X: Hypervectors, name: str = "X") -> np.ndarray:
        """Samples ``X`` as host int8 ``(n, d)``, checked and unpacked on the resolved device."""
        dev = resolve(self.device, X)
        h = hypervectors(X, dev, name)
        if len(h.lead) != 1:
            raise ShapeMismatchError(f"{name} must be (n_samples, d), got shape {h.shape}",
                                     expected="(n, d)", actual=h.shape)
        rows = call("unpack", dev, h.rows, BITPLANE, h.d)[0] if h.packed else h.rows
        return to_host(rows)

    def _check_d(self, X: np.ndarray) -> None:
        if self.sums_ is not None and X.shape[1] != self.sums_.shape[1]:
            raise ShapeMismatchError(
                f"hypervectors of dimension {X.shape[1]}; this classifier was fit on "
                f"{self.sums_.shape[1]}", expected=self.sums_.shape[1], actual=X.shape[1])

    def _labels(self, y: Any, n: int) -> np.ndarray:
        y = np.asarray(y)
        if y.shape != (n,):
            raise ShapeMismatchError(f"y must have shape ({n},), one label per sample, "
                                     f"got {y.shape}", expected=(n,), actual=y.shape)
        if y.dtype.kind not in "biufUS":
            raise TypeError(f"labels must be numbers or strings, got dtype {y.dtype}")
        known = self.classes_.dtype.kind if len(self.classes_) else y.dtype.kind
        if (known in "US") != (y.dtype.kind in "US"):
            raise TypeError(f"labels of dtype {y.dtype} do not mix with the classes seen so far "
                            f"({self.classes_.dtype}): use one kind of label, numbers or "
                            "strings")
        return y

    def __repr__(self) -> str:
        return (f"Centroid(epochs={self.epochs}, device={self.device!r}, "
                f"classes={len(self.classes_)})")

    def partial_fit(self, X: Hypervectors, y: Iterable[Any]) -> Centroid:
        """Add samples ``X`` ``(n, d)`` with labels ``y`` to the class prototypes."""
        X = self._dense(X)
        y = self._labels(y, len(X))
        self._check_d(X)
        classes = np.union1d(self.classes_, y)
        sums = np.zeros((len(classes), X.shape[1]))
        if self.sums_ is not None:
            sums[np.searchsorted(classes, self.classes_)] = self.sums_
        np.add.at(sums, np.searchsorted(classes, y), X)
        self.classes_, self.sums_ = classes, sums
        return self

    def fit(self, X: Hypervectors, y: Iterable[Any]) -> Centroid:
        """Start over: prototypes from ``X`` and ``y``, then ``epochs`` of retraining."""
        self.classes_, self.sums_ = np.empty(0, np.asarray(y).dtype), None
        self.partial_fit(X, y)
        X = self._dense(X)
        target = np.searchsorted(self.classes_, np.asarray(y))
        for _ in range(self.epochs):
            guess = self._scores(X).argmax(axis=1)
            wrong = guess != target
            if not wrong.any():
                break
            np.add.at(self.sums_, target[wrong], X[wrong])
            np.subtract.at(self.sums_, guess[wrong], X[wrong])
        return self

    def _scores(self, X: np.ndarray) -> np.ndarray:
        if self.sums_ is None:
            raise ValueError("Centroid has no classes yet: call fit or partial_fit first")
        self._check_d(X)
        norms = np.linalg.norm(self.sums_, axis=1)
        return (X @ self.sums_.T) / np.where(norms > 0, norms, 1.0)

    def decision_function(self, X: Hypervectors) -> np.ndarray:
        """``(n, n_classes)`` similarity of each sample to each prototype (cosine times |x|)."""
        return self._scores(self._dense(X).astype(np.float64))

    def predict(self, X: Hypervectors) -> np.ndarray:
        """The class of each sample ``(n, d)``: the prototype of largest cosine."""
        return self.classes_[self.decision_function(X).argmax(axis=1)]

    def score(self, X: Hypervectors, y: Iterable[Any]) -> float:
        """Accuracy of :meth:`predict` on ``X`` against labels ``y``."""
        pred = self.predict(X)
        return float((pred == self._labels(y, len(pred))).mean())
