"""Hyperdimensional classifiers of raw features, as scikit-learn estimators.

Each classifier encodes feature rows into ternary hypervectors (``encoder=``:
``"record"`` id-level binding, ``"projection"`` a random ternary projection,
``"thermometer"`` density codes, ``"nonlinear"`` a nonlinear random projection)
and learns class vectors by its paper's update rule, as torchhd 5.8 implements
it. scikit-learn is needed here only: ``import tritnum`` does not load it, and
:mod:`tritnum.vsa` loads this module on the first use of one of its names.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import (
    _check_partial_fit_first_call,
    check_classification_targets,
)
from sklearn.utils.validation import check_is_fitted, validate_data

from .. import _blas, packing
from .._dispatch import kernel
from . import _hdc_models as rules
from .classify import Centroid
from .similarity_search import similarity

__all__ = ["AdaptHDClassifier", "CentroidClassifier", "NeuralHDClassifier", "OnlineHDClassifier",
           "QuantHDClassifier", "SparseHDClassifier"]

ENCODERS = ("record", "projection", "thermometer", "nonlinear")


def _rng(random_state: Any) -> Any:
    """``random_state`` (None, int, RandomState or Generator) as a RandomState or Generator."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    return check_random_state(random_state)


def _draw(rng: Any) -> int:
    """A 62-bit seed from ``rng``."""
    return int(rng.integers(2**62) if isinstance(rng, np.random.Generator) else rng.randint(2**62))


def _small_products() -> Any:
    """One BLAS thread around the products of mini-batches with a few class vectors.

    They are too small to share: two OpenBLAS threads made them 40x slower on a busy
    2-core host. The projection encoder's product too; the nonlinear encoder's blocks
    of rows go to tritnum's threads instead, each block one single-threaded product
    (``hdc.project_trits``: two OpenBLAS threads on one product took 1.2 s against
    0.1 s for the digits set at load 10).
    (tritnum's own limiter: threadpoolctl's ``threadpool_limits`` scans the
    process's libraries on every call, 4-9 ms a fit.)
    """
    return _blas.limit(1)


class _HDClassifier(ClassifierMixin, BaseEstimator):
    """What every classifier here shares: checks, encoding, fit/partial_fit/predict."""

    def _check_params(self) -> None:
        for name in ("n_dimensions", "n_levels", "batch_size"):
            value = getattr(self, name, 1)  # the centroid has no batches
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.epochs, (int, np.integer)) or self.epochs < 0:
            raise ValueError(f"epochs must be an integer >= 0, got {self.epochs!r}")
        if self.encoder not in ENCODERS:
            raise ValueError(f"encoder must be one of {ENCODERS}, got {self.encoder!r}")
        if self.n_levels < 2 and self.encoder in ("record", "thermometer"):
            raise ValueError(f"n_levels must be >= 2 for the {self.encoder} encoder, "
                             f"got {self.n_levels}")

    @staticmethod
    def _check_labels(y: np.ndarray) -> None:
        """Labels of one kind (numbers or strings) that name classes, not a continuous target."""
        if y.dtype == object and len({isinstance(v, str) for v in y}) > 1:
            raise ValueError("Mix of label input types (string and number): labels must all "
                             "be numbers or all be strings")
        check_classification_targets(y)

    def _targets(self, y: np.ndarray) -> np.ndarray:
        """Label indices into ``classes_``; labels outside them raise ValueError."""
        t = np.searchsorted(self.classes_, y)
        known = (t < len(self.classes_)) & (self.classes_[np.minimum(t, len(self.classes_) - 1)]
                                            == y)
        if not known.all():
            raise ValueError(f"y holds labels {np.unique(y[~known]).tolist()} that are not among "
                             f"the classes {list(self.classes_)} this classifier was given")
        return t

    def _encode(self, X: np.ndarray) -> np.ndarray:
        """Rows ``X`` as ternary hypervectors, int8 ``(n, n_dimensions)``."""
        return self.encoder_.transform(X)

    def _start(self, X: np.ndarray) -> None:
        self._rng = _rng(self.random_state)
        self.encoder_ = rules.Encoder(self.encoder, self.n_dimensions, self.n_levels,
                                      _draw(self._rng)).fit(X)

    def fit(self, X: Any, y: Any) -> _HDClassifier:
        """Encode ``X`` and learn the class vectors from scratch (or on, with ``warm_start``).

        Parameters
        ----------
        X : array_like, shape (n_samples, n_features)
            Real feature rows.
        y : array_like, shape (n_samples,)
            Class labels, at least two classes.

        Returns
        -------
        object
            The fitted classifier.
        """
        self._check_params()
        warm = self.warm_start and hasattr(self, "classes_")
        X, y = validate_data(self, X, y, dtype=np.float64, order="C", reset=not warm)
        self._check_labels(y)
        if not warm:
            classes = np.unique(y)  # labels _check_labels passed: unique_labels' own checks again
            if len(classes) < 2:
                raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes; "
                                 f"y holds one class only ({classes[0]!r})")
            self.classes_ = classes
            self._start(X)
        t = self._targets(y)
        with _small_products():
            self._fit(X, self._encode(X), t, warm)
        return self

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> _HDClassifier:
        """One pass of the update rule over ``X``, ``y`` (the first call fits the encoder).

        Parameters
        ----------
        X : array_like, shape (n_samples, n_features)
            Real feature rows.
        y : array_like, shape (n_samples,)
            Their labels, each among ``classes``.
        classes : array_like, optional
            Every class label; required on the first call, the same on later ones.

        Returns
        -------
        object
            The updated classifier.
        """
        self._check_params()
        first = _check_partial_fit_first_call(self, classes)
        X, y = validate_data(self, X, y, dtype=np.float64, order="C", reset=first)
        self._check_labels(y)
        t = self._targets(y)
        if first:
            self._start(X)
            self._empty(len(self.classes_))
        with _small_products():
            self._pass(self._encode(X), t)
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """The score of each sample for each class (for two classes: class 1's minus class 0's).

        Parameters
        ----------
        X : array_like, shape (n_samples, n_features)
            Real feature rows.

        Returns
        -------
        numpy.ndarray
            ``(n_samples, n_classes)`` float64 scores, ``(n_samples,)`` for two classes.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, order="C", reset=False)
        with _small_products():
            s = np.asarray(self._scores(self._encode(X)), np.float64)
        return s[:, 1] - s[:, 0] if len(self.classes_) == 2 else s

    def predict(self, X: Any) -> np.ndarray:
        """The class of largest score for each sample (the first on ties).

        Parameters
        ----------
        X : array_like, shape (n_samples, n_features)
            Real feature rows.

        Returns
        -------
        numpy.ndarray
            ``(n_samples,)`` labels from ``classes_``.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, order="C", reset=False)
        with _small_products():
            return self.classes_[np.asarray(self._scores(self._encode(X))).argmax(axis=1)]


def _class_sums(H: np.ndarray, t: np.ndarray, n_classes: int) -> np.ndarray:
    """The integer sum of the rows of each class, ``(n_classes, d)`` int64."""
    sums = np.zeros((n_classes, H.shape[1]), np.int64)
    kernel("hdc.add_rows", "cpu")(sums, H, t)
    return sums


class _Learned(_HDClassifier):
    """Classifiers whose state is one ``class_vectors_`` array updated by passes."""

    dtype: Any = np.float64

    def _empty(self, n_classes: int) -> None:
        self.class_vectors_ = np.zeros((n_classes, self.n_dimensions), self.dtype)

    def _scores(self, H: np.ndarray) -> np.ndarray:
        return rules.cosines(H, self.class_vectors_, rules.norms(H))


_COMMON = """Parameters
    ----------
    n_dimensions : int
        The dimension ``d`` of the hypervectors.
    encoder : {"record", "projection", "thermometer", "nonlinear"}
        How rows become hypervectors: ``"record"`` binds a random key per feature
        with a level hypervector of its value (:func:`tritnum.vsa.encode_features`,
        the values mapped onto ``n_levels`` levels between the training minimum
        and maximum of each feature) and bundles the pairs; ``"thermometer"`` does
        the same with thermometer (density) codes as levels; ``"projection"``
        standardizes the features and takes ``sign(x @ P)`` for a random ternary
        ``P`` (density 2/3), with 0 where ``|x @ P|`` is below 0.43 times its RMS
        over P's draws, ``sqrt(2/3) |x|`` (about a third of the trits, as
        :func:`tritnum.vsa.random`'s density); ``"nonlinear"``, the nonlinear
        random projection of the OnlineHD and NeuralHD papers, standardizes the
        features ``z`` and takes the trits of ``cos(z @ G + b)`` for a near-Gaussian
        ``G`` (standard deviation ``1.5 / sqrt(features)``, each entry from 64
        random bits) and phases ``b`` uniform in ``[0, 2 pi)``: +1 above
        ``cos(0.3 pi)``, -1 below its negative, 0 between (40 % of the trits):
        random Fourier features, one BLAS product. The default is ``"nonlinear"``
        for OnlineHD and NeuralHD, ``"record"`` for the others.
    n_levels : int
        Levels of the record and thermometer encoders (>= 2).
    epochs : int
        """

_BATCH = """
    batch_size : int
        Samples per update: each mini-batch is predicted with the class vectors as
        they stand, then its misclassified samples update them (torchhd's rule, a
        DataLoader of this batch size without shuffling)."""

_TAIL = """
    warm_start : bool
        ``fit`` goes on from the current encoder and class vectors (same features,
        labels among ``classes_``); False: ``fit`` starts over.
    random_state : None, int, numpy.random.RandomState or numpy.random.Generator
        Seeds the random hypervectors (and NeuralHD's regenerated dimensions).

    Attributes
    ----------
    classes_ : numpy.ndarray
        The class labels, sorted.
    n_features_in_ : int
        Features seen in ``fit``.
    feature_names_in_ : numpy.ndarray
        The column names, when ``X`` had string column names."""


def _documented(cls: type) -> type:
    """``cls`` with the parameters all classifiers share written into its docstring."""
    doc = (cls.__doc__ or "").replace("{common}", _COMMON).replace("{batch}", _BATCH)
    cls.__doc__ = doc.replace("{tail}", _TAIL)
    return cls


@_documented
class CentroidClassifier(_HDClassifier):
    """Centroid (prototype) classifier of raw features, :class:`tritnum.vsa.Centroid` wrapped.

    Each class vector is the integer sum of its samples' hypervectors; a sample
    goes to the class of largest cosine. With ``epochs`` > 0, ``Centroid``'s
    perceptron retraining follows (each round, every misclassified training
    sample moves from the class it was given to its own). ``epochs=0`` is
    torchhd's ``Vanilla``. ``Centroid`` itself is unchanged: it keeps taking
    hypervectors; this estimator encodes raw rows, keeps one as ``centroid_``
    (label indices as its classes) and gives it the scikit-learn contract.
    ``partial_fit`` adds samples, ``fit`` with ``warm_start`` adds them too.

    {common}Retraining rounds after the first pass (0: none).{tail}
    centroid_ : tritnum.vsa.Centroid
        The prototypes, of the encoded samples.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> import tritnum as tn
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = tn.vsa.CentroidClassifier(n_dimensions=2000, random_state=0).fit(X, y)
    >>> bool(clf.score(X, y) > 0.85)
    True
    """

    def __init__(self, n_dimensions: int = 10_000, encoder: str = "record", n_levels: int = 100,
                 epochs: int = 0, warm_start: bool = False,
                 random_state: Any = None) -> None:
        self.n_dimensions = n_dimensions
        self.encoder = encoder
        self.n_levels = n_levels
        self.epochs = epochs
        self.warm_start = warm_start
        self.random_state = random_state

    def _empty(self, n_classes: int) -> None:
        self.centroid_ = Centroid(epochs=self.epochs)

    def _fit(self, X: np.ndarray, H: np.ndarray, t: np.ndarray, warm: bool) -> None:
        if warm:
            self.centroid_.partial_fit(H, t)
        else:
            self.centroid_ = Centroid(epochs=self.epochs).fit(H, t)

    def _pass(self, H: np.ndarray, t: np.ndarray) -> None:
        self.centroid_.partial_fit(H, t)

    def _scores(self, H: np.ndarray) -> np.ndarray:
        s = np.zeros((len(H), len(self.classes_)))  # a class not seen yet: a zero prototype
        s[:, self.centroid_.classes_] = self.centroid_.decision_function(H)
        return s


@_documented
class AdaptHDClassifier(_Learned):
    """AdaptHD: mistake-driven retraining at an adaptive learning rate.

    From zero class vectors, each epoch passes over the data in mini-batches:
    a misclassified sample (by cosine) is added to its class times the rate and
    subtracted from the predicted one (torchhd's ``AdaptHD``, ``add_adapt``).
    With ``adaptive`` (Imani et al., AdaptHD, 2019, iteration-dependent rate)
    epoch ``e``'s rate is ``lr`` times the training error rate of epoch
    ``e - 1`` (``lr`` in the first); without it, ``lr`` throughout, as torchhd.
    Class vectors are float64. ``partial_fit`` is one pass at ``lr``.

    {common}Passes over the training data.
    lr : float
        The learning rate.
    adaptive : bool
        Scale the rate by the previous epoch's error rate.{batch}{tail}
    class_vectors_ : numpy.ndarray
        ``(n_classes, n_dimensions)`` float64.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> import tritnum as tn
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = tn.vsa.AdaptHDClassifier(n_dimensions=2000, random_state=0).fit(X, y)
    >>> bool(clf.score(X, y) > 0.85)
    True
    """

    def __init__(self, n_dimensions: int = 10_000, encoder: str = "record", n_levels: int = 100,
                 epochs: int = 20, lr: float = 0.035, adaptive: bool = True,
                 batch_size: int = 32, warm_start: bool = False,
                 random_state: Any = None) -> None:
        self.n_dimensions = n_dimensions
        self.encoder = encoder
        self.n_levels = n_levels
        self.epochs = epochs
        self.lr = lr
        self.adaptive = adaptive
        self.batch_size = batch_size
        self.warm_start = warm_start
        self.random_state = random_state

    def _fit(self, X: np.ndarray, H: np.ndarray, t: np.ndarray, warm: bool) -> None:
        if not warm:
            self._empty(len(self.classes_))
        norms = rules.norms(H)
        rate = self.lr
        for _ in range(self.epochs):
            wrong = rules.adapt_pass(self.class_vectors_, H, t, rate, self.batch_size, norms)
            if not wrong:
                break
            if self.adaptive:
                rate = self.lr * wrong / len(t)

    def _pass(self, H: np.ndarray, t: np.ndarray) -> None:
        norms = rules.norms(H)
        rules.adapt_pass(self.class_vectors_, H, t, self.lr, self.batch_size, norms)


@_documented
class OnlineHDClassifier(_Learned):
    """OnlineHD: similarity-weighted updates (Hernández-Cano et al., 2021).

    From zero class vectors, each epoch passes over the data in mini-batches; a
    sample misclassified with cosines ``s`` adds ``lr (1 - s[true])`` times itself
    to its class and ``lr (s[predicted] - 1)`` times itself to the predicted one
    (torchhd's ``OnlineHD``, ``add_online``). The encoder is by default the
    paper's nonlinear random projection, ternarized: one BLAS product of the
    rows, once per fit, where torchhd re-encodes every batch in every epoch with
    its float ``Sinusoid``. Float64 class vectors; each mini-batch is scored in
    float32 (as torchhd's), one ``sgemm`` of its int8 hypervectors made float.
    ``partial_fit`` is one pass.

    {common}Passes over the training data.
    lr : float
        The learning rate.{batch}{tail}
    class_vectors_ : numpy.ndarray
        ``(n_classes, n_dimensions)`` float64.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> import tritnum as tn
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = tn.vsa.OnlineHDClassifier(n_dimensions=2000, random_state=0).fit(X, y)
    >>> bool(clf.score(X, y) > 0.85)
    True
    """

    def __init__(self, n_dimensions: int = 10_000, encoder: str = "nonlinear", n_levels: int = 100,
                 epochs: int = 20, lr: float = 0.035, batch_size: int = 32,
                 warm_start: bool = False, random_state: Any = None) -> None:
        self.n_dimensions = n_dimensions
        self.encoder = encoder
        self.n_levels = n_levels
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.warm_start = warm_start
        self.random_state = random_state

    def _fit(self, X: np.ndarray, H: np.ndarray, t: np.ndarray, warm: bool) -> None:
        if not warm:
            self._empty(len(self.classes_))
        norms = rules.norms(H)
        for _ in range(self.epochs):
            if not rules.online_pass(self.class_vectors_, H, t, self.lr, self.batch_size, norms):
                break

    def _pass(self, H: np.ndarray, t: np.ndarray) -> None:
        norms = rules.norms(H)
        rules.online_pass(self.class_vectors_, H, t, self.lr, self.batch_size, norms)


@_documented
class QuantHDClassifier(_HDClassifier):
    """QuantHD: ternary class vectors retrained through their quantization (Imani et al., 2019).

    An integer accumulator per class starts as ``k`` times the sum of its
    samples (``k = round(1 / lr)``); the class vectors are its signs, ternary
    (0 where it is 0). Each further epoch predicts every mini-batch by dot
    product with the ternary vectors and moves the accumulator by +1 times each
    misclassified sample for its class and -1 for the predicted one, then takes
    the signs again. That is torchhd's ``QuantHD`` (first pass weight 1, steps
    ``lr``) scaled by ``1 / lr``: the same signs when ``1 / lr`` is an integer.
    Prediction packs the samples and the class vectors to bit planes and scores
    them with :func:`tritnum.vsa.similarity` (integer dot products).
    ``partial_fit`` is one retraining pass (from zero on the first call).

    {common}Passes over the training data; the first one adds the samples up.
    lr : float
        The retraining step relative to the first pass's weight (> 0).{batch}{tail}
    class_counts_ : numpy.ndarray
        ``(n_classes, n_dimensions)`` int64 accumulators.
    class_vectors_ : numpy.ndarray
        ``(n_classes, n_dimensions)`` int8 trits, their signs.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> import tritnum as tn
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = tn.vsa.QuantHDClassifier(n_dimensions=2000, random_state=0).fit(X, y)
    >>> bool(clf.score(X, y) > 0.85), clf.class_vectors_.dtype
    (True, dtype('int8'))
    """

    def __init__(self, n_dimensions: int = 10_000, encoder: str = "record", n_levels: int = 100,
                 epochs: int = 20, lr: float = 0.035, batch_size: int = 32,
                 warm_start: bool = False, random_state: Any = None) -> None:
        self.n_dimensions = n_dimensions
        self.encoder = encoder
        self.n_levels = n_levels
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.warm_start = warm_start
        self.random_state = random_state

    def _empty(self, n_classes: int) -> None:
        self.class_counts_ = np.zeros((n_classes, self.n_dimensions), np.int64)
        self._quantize()

    def _quantize(self) -> None:
        self.class_vectors_ = np.sign(self.class_counts_).astype(np.int8)
        self._packed = packing.pack(self.class_vectors_, "bitplane")

    def _fit(self, X: np.ndarray, H: np.ndarray, t: np.ndarray, warm: bool) -> None:
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not warm:
            self.class_counts_ = max(1, round(1 / self.lr)) * _class_sums(H, t, len(self.classes_))
            self._quantize()
        Hf = H.astype(np.float64)  # BLAS products with the ternary vectors, exact
        for _ in range(self.epochs - (0 if warm else 1)):
            if not self._retrain(Hf, t):
                break

    def _retrain(self, Hf: np.ndarray, t: np.ndarray) -> int:
        wrong = rules.quant_pass(self.class_counts_, self.class_vectors_.astype(np.float64), Hf, t,
                                 self.batch_size)
        self._quantize()
        return wrong

    def _pass(self, H: np.ndarray, t: np.ndarray) -> None:
        self._retrain(H.astype(np.float64), t)

    def _scores(self, H: np.ndarray) -> np.ndarray:
        return similarity(packing.pack(H, "bitplane"), self._packed, "dot", pairwise=True)


@_documented
class SparseHDClassifier(_Learned):
    """SparseHD: class vectors sparsified to a target density and retrained (Imani et al.).

    From zero, each epoch is AdaptHD's mistake-driven pass (cosine, mini-batches)
    followed by dimension-wise sparsification: only the ``round(density d)``
    dimensions whose values vary most across the classes (max - min) keep them,
    the rest become 0 (torchhd's ``SparseHD`` with ``sparsity_type="dimension"``;
    its ``sparsity=0.1`` keeps 10 % of the dimensions, as ``density=0.1`` here).
    Starting from zero with steps of equal size, the class vectors are integer
    (the rule does not depend on the step's size): int64. ``partial_fit`` is one
    pass and a sparsification.

    {common}Passes over the training data.
    density : float
        The share of dimensions kept, in (0, 1].{batch}{tail}
    class_vectors_ : numpy.ndarray
        ``(n_classes, n_dimensions)`` int64, zero outside the kept dimensions.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> import numpy as np, tritnum as tn
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = tn.vsa.SparseHDClassifier(n_dimensions=2000, density=0.2, random_state=0)
    >>> bool(clf.fit(X, y).score(X, y) > 0.85), int(np.any(clf.class_vectors_, axis=0).sum())
    (True, 400)
    """

    dtype = np.int64

    def __init__(self, n_dimensions: int = 10_000, encoder: str = "record", n_levels: int = 100,
                 epochs: int = 20, density: float = 0.1, batch_size: int = 32,
                 warm_start: bool = False, random_state: Any = None) -> None:
        self.n_dimensions = n_dimensions
        self.encoder = encoder
        self.n_levels = n_levels
        self.epochs = epochs
        self.density = density
        self.batch_size = batch_size
        self.warm_start = warm_start
        self.random_state = random_state

    def _fit(self, X: np.ndarray, H: np.ndarray, t: np.ndarray, warm: bool) -> None:
        if not 0 < self.density <= 1:
            raise ValueError(f"density must be in (0, 1], got {self.density!r}")
        if not warm:
            self._empty(len(self.classes_))
        norms = rules.norms(H)
        for _ in range(self.epochs):
            rules.adapt_pass(self.class_vectors_, H, t, 1, self.batch_size, norms)
            rules.sparsify(self.class_vectors_, self.density)

    def _pass(self, H: np.ndarray, t: np.ndarray) -> None:
        norms = rules.norms(H)
        rules.adapt_pass(self.class_vectors_, H, t, 1, self.batch_size, norms)
        rules.sparsify(self.class_vectors_, self.density)


@_documented
class NeuralHDClassifier(_Learned):
    """NeuralHD: retraining that regenerates the dimensions of least variance (Zou et al.).

    The class vectors start as the sums of their samples; each further epoch is
    AdaptHD's mistake-driven pass at ``lr``. After every ``regen_freq``-th epoch
    (epoch indices ``i`` from 1 with ``i % regen_freq == regen_freq - 1``) the
    ``ceil(regen_rate d)`` dimensions whose values vary least across the
    row-normalized class vectors are dropped: set to 0 in the class vectors,
    and the encoder draws them afresh (new key columns, or new projection
    columns), as torchhd's ``NeuralHD`` redraws its ``Sinusoid`` weights. The
    encoder is by default the paper's nonlinear random projection, ternarized
    (``"nonlinear"``: one BLAS product once per fit, and of the redrawn columns
    at each regeneration). Float64 class vectors. ``partial_fit`` is one pass
    at ``lr``, without regeneration.

    {common}Passes over the training data; the first one adds the samples up.
    lr : float
        The learning rate of the retraining passes. torchhd's default is 0.37; on
        the ternary encoders' class sums it left them almost where the first pass
        put them (breast cancer 91.6 % after 3 epochs, as the first pass alone). 3
        was chosen from 0.37, 1, 3 and 10 by 5-fold cross-validation on the
        training rows of the four bundled data sets (the best mean, 95.4 %).
    regen_rate : float
        The share of dimensions regenerated each time, in [0, 1].
    regen_freq : int
        Epochs between regenerations (>= 1).{batch}{tail}
    class_vectors_ : numpy.ndarray
        ``(n_classes, n_dimensions)`` float64.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> import tritnum as tn
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = tn.vsa.NeuralHDClassifier(n_dimensions=2000, epochs=6, regen_freq=2,
    ...                                 random_state=0).fit(X, y)
    >>> bool(clf.score(X, y) > 0.85)
    True
    """

    def __init__(self, n_dimensions: int = 10_000, encoder: str = "nonlinear", n_levels: int = 100,
                 epochs: int = 20, lr: float = 3.0, regen_rate: float = 0.04,
                 regen_freq: int = 20, batch_size: int = 32, warm_start: bool = False,
                 random_state: Any = None) -> None:
        self.n_dimensions = n_dimensions
        self.encoder = encoder
        self.n_levels = n_levels
        self.epochs = epochs
        self.lr = lr
        self.regen_rate = regen_rate
        self.regen_freq = regen_freq
        self.batch_size = batch_size
        self.warm_start = warm_start
        self.random_state = random_state

    def _fit(self, X: np.ndarray, H: np.ndarray, t: np.ndarray, warm: bool) -> None:
        if not 0 <= self.regen_rate <= 1:
            raise ValueError(f"regen_rate must be in [0, 1], got {self.regen_rate!r}")
        if not isinstance(self.regen_freq, (int, np.integer)) or self.regen_freq < 1:
            raise ValueError(f"regen_freq must be an integer >= 1, got {self.regen_freq!r}")
        if not warm:
            self.class_vectors_ = _class_sums(H, t, len(self.classes_)).astype(np.float64)
        norms = rules.norms(H)
        n_regen = math.ceil(self.regen_rate * self.n_dimensions)
        fresh = None  # regenerated columns, written into the rows by the next pass
        for epoch in range(1, self.epochs):
            rules.adapt_pass(self.class_vectors_, H, t, self.lr, self.batch_size, norms, fresh)
            fresh = None
            if epoch % self.regen_freq == self.regen_freq - 1 and n_regen:
                dims = rules.weakest(self.class_vectors_, n_regen)
                self.class_vectors_[:, dims] = 0.0
                self.encoder_.regenerate(dims, _draw(self._rng))
                if epoch < self.epochs - 1:  # a pass reads the rows again (the last: none)
                    fresh = (dims, self.encoder_.transform(X, dims))

    def _pass(self, H: np.ndarray, t: np.ndarray) -> None:
        norms = rules.norms(H)
        rules.adapt_pass(self.class_vectors_, H, t, self.lr, self.batch_size, norms)
