"""Classification of hypervectors: a centroid (prototype) classifier."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .._dispatch import call, place
from .._interop import Origin, to_host
from ..errors import ShapeMismatchError
from ..typing import Device
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
        Where samples are checked, added up and scored ("auto": where they
        live). The prototypes are kept as float64 NumPy arrays; scores and
        predictions come back where, and in the framework in which, the samples
        live (predicted labels as NumPy when the labels are strings).

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

    def __init__(self, *, epochs: int = 0, device: Device = "auto") -> None:
        self.epochs = count(epochs, "epochs")
        self.device = device
        self.classes_: np.ndarray = np.empty(0, np.int64)
        self.sums_: np.ndarray | None = None

    def _rows(self, X: Hypervectors, name: str = "X") -> tuple[Any, str, Origin]:
        """Samples ``X`` as int8 ``(n, d)`` on the resolved device, it, and where results go."""
        dev = resolve(self.device, X)
        h = hypervectors(X, dev, name)
        if len(h.lead) != 1:
            raise ShapeMismatchError(f"{name} must be (n_samples, d), got shape {h.shape}",
                                     expected="(n, d)", actual=h.shape)
        rows = call("unpack", dev, h.rows, BITPLANE, h.d)[0] if h.packed else h.rows
        return rows, dev, h.like

    @staticmethod
    def _class_sums(rows: Any, dev: str, labels: np.ndarray, classes: int) -> np.ndarray:
        """The sums of the rows of each class, in one pass over the rows (int64 on the host)."""
        return to_host(call("vsa.class_sums", dev, rows, np.ascontiguousarray(labels, np.int64),
                            classes))

    def _check_d(self, d: int) -> None:
        if self.sums_ is not None and d != self.sums_.shape[1]:
            raise ShapeMismatchError(
                f"hypervectors of dimension {d}; this classifier was fit on "
                f"{self.sums_.shape[1]}", expected=self.sums_.shape[1], actual=d)

    def _labels(self, y: Any, n: int) -> np.ndarray:
        y = to_host(y)
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

    def _add(self, rows: Any, dev: str, y: Any) -> np.ndarray:
        """Add the rows (int8 on ``dev``) with labels ``y`` to the prototypes; their classes."""
        y = self._labels(y, rows.shape[0])
        self._check_d(rows.shape[1])
        classes = np.union1d(self.classes_, y)
        sums = np.zeros((len(classes), rows.shape[1]))
        if self.sums_ is not None:
            sums[np.searchsorted(classes, self.classes_)] = self.sums_
        target = np.searchsorted(classes, y)
        sums += self._class_sums(rows, dev, target, len(classes))
        self.classes_, self.sums_ = classes, sums
        return target

    def partial_fit(self, X: Hypervectors, y: Iterable[Any]) -> Centroid:
        """Add samples ``X`` ``(n, d)`` with labels ``y`` to the class prototypes.

        Parameters
        ----------
        X : array_like of int or PackedTrits
            Hypervectors ``(n, d)``, of the dimension of earlier samples.
        y : array_like
            One label per sample, numbers or strings (one kind for all calls).

        Returns
        -------
        Centroid
            The classifier itself.
        """
        rows, dev, _ = self._rows(X)
        self._add(rows, dev, y)
        return self

    def fit(self, X: Hypervectors, y: Iterable[Any]) -> Centroid:
        """Start over: prototypes from ``X`` and ``y``, then ``epochs`` of retraining.

        Parameters
        ----------
        X : array_like of int or PackedTrits
            Hypervectors ``(n, d)``.
        y : array_like
            One label per sample, numbers or strings.

        Returns
        -------
        Centroid
            The classifier itself.
        """
        self.classes_, self.sums_ = np.empty(0, to_host(y).dtype), None
        rows, dev, _ = self._rows(X)
        target = self._add(rows, dev, y)
        classes = len(self.classes_)
        for _ in range(self.epochs):
            guess = to_host(self._scores(rows, dev)[1])
            wrong = guess != target
            if not wrong.any():
                break
            # misclassified samples move toward their own class, away from the one they
            # were given; the others count for an extra class that is dropped
            self.sums_ += self._class_sums(rows, dev, np.where(wrong, target, classes),
                                           classes + 1)[:classes]
            self.sums_ -= self._class_sums(rows, dev, np.where(wrong, guess, classes),
                                           classes + 1)[:classes]
        return self

    def _scores(self, rows: Any, dev: str) -> tuple[Any, Any]:
        """Scores of int8 ``rows`` on ``dev`` against every prototype, and the best class."""
        if self.sums_ is None or not len(self.classes_):
            raise ValueError("Centroid has no classes yet: call fit or partial_fit first")
        self._check_d(rows.shape[1])
        norms = np.linalg.norm(self.sums_, axis=1)
        return call("vsa.class_scores", dev, rows, self.sums_, np.where(norms > 0, norms, 1.0))

    def decision_function(self, X: Hypervectors) -> Any:
        """``(n, n_classes)`` similarity of each sample to each prototype (cosine times ``|x|``).

        Parameters
        ----------
        X : array_like of int or PackedTrits
            Hypervectors ``(n, d)``.

        Returns
        -------
        array
            Float64 scores, where and in the framework in which ``X`` lives.
        """
        rows, dev, like = self._rows(X)
        return place(self._scores(rows, dev)[0], like)

    def predict(self, X: Hypervectors) -> Any:
        """The class of each sample ``(n, d)``: the prototype of largest cosine (first on ties).

        Parameters
        ----------
        X : array_like of int or PackedTrits
            Hypervectors ``(n, d)``.

        Returns
        -------
        array
            Labels of ``classes_``'s dtype where ``X`` lives; NumPy for string labels.
        """
        rows, dev, like = self._rows(X)
        labels = self.classes_[to_host(self._scores(rows, dev)[1])]
        return labels if labels.dtype.kind in "US" else place(labels, like)

    def score(self, X: Hypervectors, y: Iterable[Any]) -> float:
        """Accuracy of :meth:`predict` on ``X`` against labels ``y``.

        Parameters
        ----------
        X : array_like of int or PackedTrits
            Hypervectors ``(n, d)``.
        y : array_like
            The true label of each sample.

        Returns
        -------
        float
            The share of samples predicted right.
        """
        pred = to_host(self.predict(X))
        return float((pred == self._labels(y, len(pred))).mean())
