"""HDC classifiers against torchhd's (issue 31, item 3): accuracy and fit + predict time.

Every classifier of :mod:`tritnum.vsa.estimators` meets torchhd's classifier of the
same name (``Vanilla`` for the centroid) on scikit-learn's bundled data sets
(digits, iris, wine, breast cancer): a stratified 75/25 split with seed 0, the
features scaled to [-1, 1] by the training rows' range (torchhd's level encoders
cover [-1, 1]), d = 10,000, the same epochs and mini-batches of 32 on both sides,
no shuffling. A row times fit + predict of the test rows, encoding included, each
side with its own encoder: tritnum's ``"record"`` encoding where torchhd binds
keys with levels (Vanilla, AdaptHD, QuantHD, SparseHD), its ``"projection"``
where torchhd projects (``Sinusoid``: OnlineHD, NeuralHD). NeuralHD regenerates
every ``epochs // 2`` epochs on both sides. The note gives both accuracies on
the test rows. Bars: 5x on digits and breast cancer, 1x (not slower) on iris
and wine. Without scikit-learn or torch-hd the rows say so.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from .._extras import install_hint
from .harness import Case

DATASETS = ("digits", "iris", "wine", "breast_cancer")
# tritnum's estimator, its encoder, torchhd's classifier
MODELS = (("CentroidClassifier", "record", "Vanilla"), ("AdaptHDClassifier", "record", "AdaptHD"),
          ("OnlineHDClassifier", "projection", "OnlineHD"),
          ("QuantHDClassifier", "record", "QuantHD"),
          ("SparseHDClassifier", "record", "SparseHD"),
          ("NeuralHDClassifier", "projection", "NeuralHD"))
BARS = {"digits": 5.0, "breast_cancer": 5.0, "iris": 1.0, "wine": 1.0}
D = 10_000
BATCH = 32


def split(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Data set ``name``: training and test rows scaled to [-1, 1], and their labels."""
    from sklearn import datasets
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import MinMaxScaler

    X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    scale = MinMaxScaler((-1, 1)).fit(Xtr)
    return (scale.transform(Xtr).astype(np.float32), scale.transform(Xte).astype(np.float32),
            ytr, yte)


def _ours(model: str, encoder: str, epochs: int, data: tuple, acc: dict) -> Callable[[], Any]:
    import tritnum as tn

    Xtr, Xte, ytr, yte = data
    options: dict[str, Any] = ({"epochs": 0} if model == "CentroidClassifier"
                               else {"epochs": epochs, "batch_size": BATCH})
    if model == "NeuralHDClassifier":
        options["regen_freq"] = max(1, epochs // 2)

    def run() -> None:
        clf = getattr(tn.vsa, model)(n_dimensions=D, encoder=encoder, random_state=0,
                                     **options).fit(Xtr, ytr)
        acc["ours"] = float(np.mean(clf.predict(Xte) == yte))
    return run


def _theirs(torch: Any, classifiers: Any, model: str, epochs: int, data: tuple,
            acc: dict) -> Callable[[], Any]:
    Xtr, Xte, ytr, yte = data
    xs, ys, xt = torch.from_numpy(Xtr), torch.from_numpy(ytr), torch.from_numpy(Xte)
    loader = [(xs[r:r + BATCH], ys[r:r + BATCH]) for r in range(0, len(xs), BATCH)]
    options: dict[str, Any] = {} if model == "Vanilla" else {"epochs": epochs}
    if model == "NeuralHD":
        options["regen_freq"] = max(1, epochs // 2)

    def run() -> None:
        torch.manual_seed(0)
        clf = getattr(classifiers, model)(Xtr.shape[1], D, int(ytr.max()) + 1, **options)
        clf.fit(loader)
        with torch.no_grad():
            acc["theirs"] = float((clf.predict(xt).numpy() == yte).mean())
    return run


def _note(acc: dict) -> Callable[[float], str]:
    return lambda _: f"accuracy {acc.get('ours', 0):.1%} vs torchhd {acc.get('theirs', 0):.1%}"


def hdc_cases(quick: bool) -> list[Case]:
    """One row per data set and classifier (``quick``: 3 epochs, digits and iris only)."""
    epochs = 3 if quick else 10
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return [Case("hdc", "HDC classifiers", lambda: None, "torchhd", lambda: None, None, 1,
                     lambda s: f"scikit-learn not installed ({install_hint('demo')}): skipped")]
    try:
        os.environ.setdefault("TQDM_DISABLE", "1")  # torchhd's fit shows progress bars
        import torch
        from torchhd import classifiers
    except ImportError:
        torch = classifiers = None
    cases = []
    for name in DATASETS[:2] if quick else DATASETS:
        data = split(name)
        for model, encoder, theirs in MODELS:
            acc: dict[str, float] = {}
            run = _ours(model, encoder, epochs, data, acc)
            if classifiers is None:
                cases.append(Case("hdc", f"{name} {model}", run, "torchhd", lambda: None,
                                  None, 1, lambda s: f"torch-hd not installed "
                                                     f"({install_hint('bench')}): skipped"))
                continue
            cases.append(Case("hdc", f"{name} {model} ({encoder})", run, f"torchhd {theirs}",
                              _theirs(torch, classifiers, theirs, epochs, data, acc),
                              BARS[name], 1, _note(acc),
                              params={"op": "fit+predict", "data": name, "model": model,
                                      "encoder": encoder, "epochs": epochs, "d": D}))
    return cases
