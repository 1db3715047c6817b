"""Structures built from bind, bundle and permute: graphs, trees, automata, and cleanup.

The ternary counterparts of torchhd's ``graph``, ``Graph``, ``Tree``,
``FiniteStateAutomata`` and ``cleanup`` (MAP model). They compose the public
operations, so they take dense or "bitplane" hypervectors on any device and
return the kind (and device) they were given. Binding is the elementwise
product (``rule="mul"``): the queries need a bind that undoes itself and
commutes, which ``"mod3"`` (``a - b``) does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._interop import origin, to_host
from ..errors import ShapeMismatchError
from ..packing import PackedTrits, pack, unpack
from ..typing import Device, Metric
from ._hv import Hypervectors, place_scores, resolve
from .algebra import bind, permute
from .sequences import _sequence, hash_table
from .similarity_search import search

__all__ = ["automaton", "automaton_step", "cleanup", "graph", "graph_neighbors", "tree",
           "tree_leaf"]


def _shape(x: Hypervectors) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def _check(op: str, *, rank: int = 1, broadcast: bool = True,
           **inputs: Hypervectors) -> tuple[int, ...]:
    """Same kind (dense or bitplane) and dimension, leading shapes that broadcast.

    Read from the shapes alone, before any kernel runs; ``rank`` is the least
    rank of each input. Returns the broadcast leading shape (``()`` without
    ``broadcast``: the leading shapes are not compared).
    """
    names, xs = list(inputs), list(inputs.values())
    for name, x in inputs.items():
        if len(_shape(x)) < rank:
            raise ShapeMismatchError(
                f"{op}: {name} must be hypervectors of rank >= {rank}, got shape {_shape(x)}",
                expected=f"ndim >= {rank}", actual=_shape(x))
    packed = [isinstance(x, PackedTrits) for x in xs]
    if len(set(packed)) > 1:
        raise TypeError(f"{op}: {', '.join(names)} must all be dense int8 arrays or all "
                        "'bitplane' PackedTrits; convert with tn.pack(x, 'bitplane') or "
                        "tn.unpack(p)")
    d = _shape(xs[0])[-1]
    for name, x in zip(names[1:], xs[1:], strict=True):
        if _shape(x)[-1] != d:
            raise ShapeMismatchError(
                f"{op}: {name} has dimension {_shape(x)[-1]}, {names[0]} has {d}",
                expected=d, actual=_shape(x)[-1])
    if not broadcast:
        return ()
    try:
        return np.broadcast_shapes(*(_shape(x)[:-1] for x in xs))
    except ValueError:
        raise ShapeMismatchError(
            f"{op}: the leading shapes of {', '.join(names)} "
            f"({', '.join(str(_shape(x)[:-1]) for x in xs)}) do not broadcast",
            expected="broadcastable", actual=tuple(_shape(x)[:-1] for x in xs)) from None


def graph(sources: Hypervectors, targets: Hypervectors, *, directed: bool = False,
          device: Device = "auto") -> Hypervectors:
    """Encode a graph from its edge set: the bundle of its bound edges.

    Edge ``i`` joins node ``sources[i]`` to node ``targets[i]``; it is encoded as
    ``bind(sources[i], targets[i])`` (undirected: the product commutes) or
    ``bind(sources[i], permute(targets[i], 1))`` (directed, from source to
    target), and the graph is the majority :func:`bundle` of its edges, torchhd's
    ``graph``. Query it with :func:`graph_neighbors`.

    Parameters
    ----------
    sources, targets : array_like of int or PackedTrits
        ``(..., n, d)``: the two end nodes of ``n`` edges (leading axes are a batch
        of graphs), of the same kind.
    directed : bool
        Whether each edge runs from its source to its target.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(..., d)``.

    Raises
    ------
    ShapeMismatchError
        Inputs of rank < 2, different dimensions, or leading shapes that do not broadcast.
    TypeError
        One input dense and the other packed.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> nodes = tn.vsa.random(4, 10_000, seed=0)
    >>> edges = np.array([[0, 1], [0, 2], [2, 3]])           # 0-1, 0-2, 2-3
    >>> g = tn.vsa.graph(nodes[edges[:, 0]], nodes[edges[:, 1]])
    >>> near = tn.vsa.graph_neighbors(g, nodes[0])
    >>> tn.vsa.similarity(near, nodes) > 0.3                  # 1 and 2, not 0 or 3
    array([False,  True,  True, False])
    """
    sources, targets = _sequence(sources), _sequence(targets)
    _check("graph", rank=2, sources=sources, targets=targets)
    if directed:
        targets = permute(targets, 1, device=device)
    return hash_table(sources, targets, device=device)


def graph_neighbors(g: Hypervectors, node: Hypervectors, *, directed: bool = False,
                    incoming: bool = False, device: Device = "auto") -> Hypervectors:
    """The neighbours of ``node`` in a :func:`graph`: a noisy bundle of their vectors.

    Undirected: ``bind(g, node)``. Directed, the nodes ``node`` has an edge to:
    ``permute(bind(g, node), -1)``; the nodes with an edge to ``node``
    (``incoming=True``): ``bind(g, permute(node, 1))``. Each neighbour is similar
    to the result (the less, the more edges the graph has), any
    other node is not; compare with :func:`similarity` or clean up with
    :func:`cleanup`.

    Parameters
    ----------
    g : array_like of int or PackedTrits
        ``(..., d)`` graphs made by :func:`graph`.
    node : array_like of int or PackedTrits
        ``(..., d)`` node vectors, the kind of ``g``; leading shapes broadcast.
    directed : bool
        How ``g`` was made.
    incoming : bool
        Directed graphs only: the nodes with an edge to ``node`` instead of those
        ``node`` has an edge to.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(..., d)``.

    Raises
    ------
    ValueError
        ``incoming=True`` for an undirected graph.
    ShapeMismatchError
        Different dimensions, or leading shapes that do not broadcast.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> a, b, c = tn.vsa.random(3, 10_000, seed=1)
    >>> g = tn.vsa.graph(np.stack([a, b]), np.stack([b, c]), directed=True)  # a->b, b->c
    >>> out = tn.vsa.graph_neighbors(g, b, directed=True)
    >>> into = tn.vsa.graph_neighbors(g, b, directed=True, incoming=True)
    >>> tn.vsa.similarity(out, np.stack([a, c])) > 0.3       # b -> c
    array([False,  True])
    >>> tn.vsa.similarity(into, np.stack([a, c])) > 0.3      # a -> b
    array([ True, False])
    """
    if incoming and not directed:
        raise ValueError("graph_neighbors: incoming=True needs a directed graph "
                         "(an undirected graph's edges have no direction)")
    g, node = _sequence(g), _sequence(node)
    _check("graph_neighbors", g=g, node=node)
    if not directed:
        return bind(g, node, device=device)
    if incoming:
        return bind(g, permute(node, 1, device=device), device=device)
    return permute(bind(g, node, device=device), -1, device=device)


def _path(path: Any, op: str) -> str:
    """A tree path as a str of ``"l"``/``"r"`` (ValueError if it is anything else or empty)."""
    if not isinstance(path, str):
        if not isinstance(path, Sequence) or not all(isinstance(c, str) for c in path):
            raise TypeError(f"{op}: a path is a str (or a sequence of str) of 'l' and 'r', "
                            f"got {path!r}")
        path = "".join(path)
    if not path or set(path) - {"l", "r"}:
        raise ValueError(f"{op}: a path is a non-empty string of 'l' (left) and 'r' (right), "
                         f"got {path!r}")
    return path


def _path_keys(paths: list[str], branches: Hypervectors, packed: bool, device: str
               ) -> Hypervectors:
    """The key of each path, ``bind`` over ``j`` of ``permute(branches[c_j], j)``, ``(n, d)``.

    Made where ``branches`` is read (the host for GPU branches: two vectors, and
    keys as many as leaves); in the kind ``packed`` says.
    """
    dev = resolve(device, branches)
    host_dev = "cpu" if dev == "cuda" else dev
    table = to_host(unpack(branches) if isinstance(branches, PackedTrits) else branches)
    choice = np.full((len(paths), max(map(len, paths))), -1, np.int64)
    for i, path in enumerate(paths):
        choice[i, :len(path)] = [0 if c == "l" else 1 for c in path]
    keys = np.ones((len(paths), table.shape[-1]), np.int8)
    for j in range(choice.shape[1]):
        rolled = permute(table.astype(np.int8), j, device=host_dev)
        step = np.where(choice[:, j, None] >= 0, rolled[np.maximum(choice[:, j], 0)], 1)
        keys = bind(keys, step.astype(np.int8), device=host_dev)
    return pack(keys, "bitplane", device=host_dev) if packed else keys


def _branches(branches: Hypervectors, op: str, **others: Hypervectors) -> Hypervectors:
    branches = _sequence(branches)
    _check(op, broadcast=False, branches=branches, **others)
    if _shape(branches)[:-1] != (2,):
        raise ShapeMismatchError(
            f"{op}: branches must be 2 hypervectors (left, right), shape (2, d), got "
            f"{_shape(branches)}", expected=(2, _shape(branches)[-1]), actual=_shape(branches))
    return branches


def tree(leaves: Hypervectors, paths: Sequence[Any], branches: Hypervectors, *,
         device: Device = "auto") -> Hypervectors:
    """Encode a binary tree: each leaf bound to the key of its path, bundled.

    The key of a path ``c_0 c_1 ... c_{L-1}`` (each ``"l"`` or ``"r"``, from the
    root down) binds the left or right branch vector rolled by its depth,
    ``bind(permute(branches[c_0], 0), permute(branches[c_1], 1), ...)``, as
    torchhd's ``Tree.add_leaf``; the tree is ``hash_table(keys, leaves)``.
    :func:`tree_leaf` reads a leaf back. Branch vectors with zeros blank those
    positions of every key (more of them the deeper the leaf): draw them with
    ``density=1.0`` for keys with no zeros.

    Parameters
    ----------
    leaves : array_like of int or PackedTrits
        ``(n, d)``: the value at the end of each path.
    paths : sequence of str
        ``n`` non-empty strings of ``"l"`` and ``"r"`` (or sequences of them).
    branches : array_like of int or PackedTrits
        ``(2, d)``: the left and the right branch vectors, the kind of ``leaves``.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run (the keys are made where ``branches`` is read: the CPU
        for GPU branches).

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(d,)``.

    Raises
    ------
    ShapeMismatchError
        ``leaves`` not ``(n, d)`` with one path per leaf, ``branches`` not
        ``(2, d)``, or different dimensions.
    ValueError
        A path that is empty or holds anything but ``"l"`` and ``"r"``.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> lr = tn.vsa.random(2, 10_000, density=1.0, seed=2)
    >>> x, y, z = tn.vsa.random(3, 10_000, seed=3)
    >>> t = tn.vsa.tree(np.stack([x, y, z]), ["l", "rl", "rr"], lr)
    >>> tn.vsa.similarity(tn.vsa.tree_leaf(t, "rl", lr), np.stack([x, y, z])) > 0.3
    array([False,  True, False])
    """
    leaves = _sequence(leaves)
    branches = _branches(branches, "tree", leaves=leaves)
    if len(_shape(leaves)) != 2:
        raise ShapeMismatchError(f"tree: leaves must be (n, d), got shape {_shape(leaves)}",
                                 expected="(n, d)", actual=_shape(leaves))
    paths = [_path(p, "tree") for p in paths]
    if len(paths) != _shape(leaves)[0]:
        raise ShapeMismatchError(
            f"tree: {len(paths)} paths for {_shape(leaves)[0]} leaves (one path per leaf)",
            expected=_shape(leaves)[0], actual=len(paths))
    if not paths:
        raise ValueError("tree: no leaves (n == 0); give at least one leaf and its path")
    keys = _path_keys(paths, branches, isinstance(leaves, PackedTrits), device)
    return hash_table(keys, leaves, device=device)


def tree_leaf(t: Hypervectors, path: Any, branches: Hypervectors, *,
              device: Device = "auto") -> Hypervectors:
    """The value at ``path`` of a :func:`tree`: ``bind(t, key(path))``, noisy.

    The result is similar to the leaf stored at ``path`` (or to the bundle of
    the leaves below it, for a path that stops above them), and unlike the
    others; clean it up with :func:`cleanup`.

    Parameters
    ----------
    t : array_like of int or PackedTrits
        ``(..., d)`` trees made with ``branches``.
    path : str
        A non-empty string of ``"l"`` and ``"r"`` from the root (or a sequence of them).
    branches : array_like of int or PackedTrits
        ``(2, d)``: the branch vectors the tree was made with.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(..., d)``.

    Raises
    ------
    ShapeMismatchError
        ``branches`` not ``(2, d)``, or a dimension unlike the tree's.
    ValueError
        A path that is empty or holds anything but ``"l"`` and ``"r"``.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> lr = tn.vsa.random(2, 10_000, density=1.0, seed=4)
    >>> leaves = tn.vsa.random(2, 10_000, seed=5)
    >>> t = tn.vsa.tree(leaves, ["ll", "lr"], lr)
    >>> tn.vsa.similarity(tn.vsa.tree_leaf(t, ["l", "r"], lr), leaves) > 0.3
    array([False,  True])
    """
    t = _sequence(t)
    branches = _branches(branches, "tree_leaf", t=t)
    key = _path_keys([_path(path, "tree_leaf")], branches, isinstance(t, PackedTrits), device)
    return bind(t, key[0], device=device)


def automaton(tokens: Hypervectors, sources: Hypervectors, targets: Hypervectors, *,
              device: Device = "auto") -> Hypervectors:
    """Encode a finite-state automaton from its transitions.

    Transition ``i`` goes from state ``sources[i]`` to state ``targets[i]`` on
    input ``tokens[i]``; it is ``bind(tokens[i], bind(sources[i],
    permute(targets[i], 1)))`` and the automaton is their bundle, torchhd's
    ``FiniteStateAutomata``. :func:`automaton_step` follows a transition.

    Parameters
    ----------
    tokens, sources, targets : array_like of int or PackedTrits
        ``(..., n, d)`` each, of one kind: the ``n`` transitions.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(..., d)``.

    Raises
    ------
    ShapeMismatchError
        Inputs of rank < 2, different dimensions, or leading shapes that do not broadcast.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> locked, unlocked = states = tn.vsa.random(2, 10_000, seed=6)
    >>> push, coin = tn.vsa.random(2, 10_000, seed=7)
    >>> fsa = tn.vsa.automaton(
    ...     np.stack([coin, push, coin, push]),          # on this input,
    ...     np.stack([locked, unlocked, unlocked, locked]),   # from this state
    ...     np.stack([unlocked, locked, unlocked, locked]))   # to this one
    >>> tn.vsa.cleanup(tn.vsa.automaton_step(fsa, locked, coin), states)[0]
    np.int64(1)
    """
    tokens, sources, targets = _sequence(tokens), _sequence(sources), _sequence(targets)
    _check("automaton", rank=2, tokens=tokens, sources=sources, targets=targets)
    edges = bind(sources, permute(targets, 1, device=device), device=device)
    return hash_table(tokens, edges, device=device)


def automaton_step(fsa: Hypervectors, state: Hypervectors, token: Hypervectors, *,
                   device: Device = "auto") -> Hypervectors:
    """The next state of an :func:`automaton`: ``permute(bind(bind(fsa, state), token), -1)``.

    The result is similar to the target of the transition from ``state`` on
    ``token`` and unlike every other state; :func:`cleanup` names it.

    Parameters
    ----------
    fsa : array_like of int or PackedTrits
        ``(..., d)`` automata.
    state, token : array_like of int or PackedTrits
        ``(..., d)``: the current state and the input, of the kind of ``fsa``;
        leading shapes broadcast.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    numpy.ndarray or PackedTrits
        ``(..., d)``.

    Raises
    ------
    ShapeMismatchError
        Different dimensions, or leading shapes that do not broadcast.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> s0, s1, t = tn.vsa.random(3, 10_000, seed=8)
    >>> fsa = tn.vsa.automaton(t[None], s0[None], s1[None])
    >>> tn.vsa.similarity(tn.vsa.automaton_step(fsa, s0, t), np.stack([s0, s1])) > 0.3
    array([False,  True])
    """
    fsa, state, token = _sequence(fsa), _sequence(state), _sequence(token)
    _check("automaton_step", fsa=fsa, state=state, token=token)
    return permute(bind(bind(fsa, state, device=device), token, device=device), -1,
                   device=device)


def cleanup(queries: Hypervectors, memory: Hypervectors, *, threshold: float = 0.0,
            metric: Metric = "cosine", device: Device = "auto") -> tuple[Any, Any]:
    """The most similar row of ``memory`` for each query, or ``-1`` (no match) below ``threshold``.

    torchhd's ``cleanup``, batched: the best match (ties to the lower index, as
    :func:`search`) is kept when its similarity is at least ``threshold``;
    a query whose best score is below it gets index ``-1``, "no match". The
    cleaned vectors are ``memory[indices]`` where ``indices >= 0`` (do not index
    with the ``-1`` entries: they name no row).

    Parameters
    ----------
    queries : array_like of int or PackedTrits
        ``(..., d)`` noisy hypervectors.
    memory : array_like of int or PackedTrits
        ``(m, d)`` clean hypervectors, the kind of ``queries``, ``m >= 1``.
    threshold : float
        The least similarity of a match (finite), in the unit of ``metric``.
    metric : {"cosine", "dot", "hamming"}
        As for :func:`similarity`.
    device : {"auto", "cpu", "cuda", "numpy"}
        Where to run.

    Returns
    -------
    indices : numpy.ndarray or numpy.int64
        ``(...)`` int64: the matching row, or ``-1``.
    scores : numpy.ndarray or scalar
        ``(...)``: the best similarity of each query (also where it is below the threshold).

    Raises
    ------
    TypeError
        A threshold that is not a real number.
    ValueError
        A threshold that is not finite, or an empty memory.
    ShapeMismatchError
        A memory that is not ``(m, d)``, or a different dimension.

    Examples
    --------
    >>> import numpy as np, tritnum as tn
    >>> memory = tn.vsa.random(3, 1000, seed=9)
    >>> noisy = memory[1].copy()
    >>> noisy[:600] = 0
    >>> unknown = tn.vsa.random(1, 1000, seed=10)[0]
    >>> idx, scores = tn.vsa.cleanup(np.stack([noisy, unknown]), memory, threshold=0.3)
    >>> idx, scores.round(2)
    (array([ 1, -1]), array([0.64, 0.02]))
    """
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer,
                                                                 np.floating)):
        raise TypeError(f"cleanup: threshold must be a real number, got {threshold!r}")
    if not math.isfinite(threshold):
        raise ValueError(f"cleanup: threshold must be finite, got {threshold!r}")
    idx, scores = search(queries, memory, 1, metric, device=device)
    best, hit = to_host(scores)[..., 0], to_host(idx)[..., 0]
    hit = np.where(best >= threshold, hit, -1).astype(np.int64)
    lead = tuple(best.shape)
    return place_scores(hit, lead, origin(idx)), place_scores(best, lead, origin(scores))
