"""Compressed gradients in PyTorch training: an optimizer (or model) hook and a DDP comm hook.

Both compress by random ternary projection with error feedback (:mod:`tritnum.compress`):

- :func:`register_compression` replaces each parameter's ``.grad``, before the optimizer
  steps, by the update :class:`tritnum.ErrorFeedback` applies for it: the projection of
  the gradient plus the residual the earlier steps left. One residual per parameter, and a
  seed per parameter and step (a hash of the seed given and the parameter's index, plus
  the step), so a run is reproducible.
- :func:`ddp_comm_hook` with a :class:`CompressionState` (``model.register_comm_hook``)
  compresses each DDP gradient bucket, all-reduces the sketch instead of the bucket
  (sketches are linear: the sum of the sketches is the sketch of the sum) and decompresses
  it: ``ratio`` times fewer bytes on the wire.

tritnum's kernels run where the gradients live (CPU, or CUDA for CUDA tensors). Importing
this module imports torch; ``import tritnum`` does not. ``tritnum.torch.compress`` re-exports it.
"""

from __future__ import annotations

from typing import Any

import torch

from ..compress import ErrorFeedback, _child_seed, _ratio, decompress
from ..vsa.generation import Seed, draw_seed

__all__ = ["CompressionState", "GradientCompression", "ddp_comm_hook", "register_compression"]


def _feedback(ratio: float, seed: int, index: int) -> ErrorFeedback:
    """The error feedback of member ``index`` (a parameter, a bucket) of a run seeded ``seed``."""
    return ErrorFeedback(ratio, _child_seed(seed, index))


class GradientCompression:
    """Compression of the gradients of a set of parameters (made by :func:`register_compression`).

    :meth:`remove` takes the hooks off.

    Parameters
    ----------
    params : list of torch.nn.Parameter
        The parameters whose gradients are compressed, in the optimizer's or the
        model's order.
    ratio : float
        Elements per sketch value, >= 1.
    seed : int
        Seed of the run; parameter ``i`` gets a seed of its own derived from it.

    Attributes
    ----------
    ratio : float
        Elements per sketch value.
    seed : int
        Seed of the run.
    feedback : list of tritnum.ErrorFeedback
        ``feedback[i]`` is the :class:`tritnum.ErrorFeedback` of parameter ``i``,
        holding its residual.
    """

    def __init__(self, params: list[torch.nn.Parameter], ratio: float, seed: int) -> None:
        self.ratio = ratio
        self.seed = seed
        self.feedback = [_feedback(ratio, seed, i) for i in range(len(params))]
        self._params = params
        self._index = {id(p): i for i, p in enumerate(params)}
        self._handles: list[Any] = []

    @torch.no_grad()
    def apply(self, param: torch.Tensor) -> None:
        """Replace ``param.grad`` by the update its error feedback applies (None stays None).

        Parameters
        ----------
        param : torch.Tensor
            One of the parameters the compression was made for.

        Raises
        ------
        TypeError
            A sparse (not strided) gradient.
        """
        grad = param.grad
        if grad is None:
            return
        if grad.layout != torch.strided:
            raise TypeError(f"gradient compression needs dense gradients, got {grad.layout}")
        grad.copy_(self.feedback[self._index[id(param)]](grad))

    def apply_all(self) -> None:
        """:meth:`apply` to every parameter."""
        for param in self._params:
            self.apply(param)

    def remove(self) -> None:
        """Take the hooks off (the residuals stay in ``feedback``)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __repr__(self) -> str:
        return (f"GradientCompression({len(self._params)} parameters, ratio={self.ratio}, "
                f"seed={self.seed}, hooks={'on' if self._handles else 'off'})")


def register_compression(target: torch.optim.Optimizer | torch.nn.Module, ratio: float,
                         seed: Seed = None) -> GradientCompression:
    """Compress every gradient of ``target`` with error feedback before it is applied.

    Parameters
    ----------
    target : torch.optim.Optimizer or torch.nn.Module
        An optimizer: its parameters' gradients are compressed in a step pre-hook, once
        per ``optimizer.step()`` (gradient accumulation over several backward passes is
        fine). A module: each parameter's gradient is compressed after it is accumulated,
        in every backward pass (a post-accumulate-grad hook), so use one backward per step.
    ratio : float
        Elements per sketch value, >= 1.
    seed : int, numpy.random.SeedSequence, numpy.random.Generator or None
        Seed of the run (``None`` draws one); each parameter and step gets a seed of its own.

    Returns
    -------
    GradientCompression
        The handle: ``.feedback`` (the residuals), ``.remove()``.

    Notes
    -----
    With mixed precision, hook the optimizer: ``GradScaler.step`` unscales the gradients
    and skips steps with infinities before the optimizer's pre-hook runs, while a module's
    hooks see the scaled gradients.

    Examples
    --------
    >>> import torch
    >>> from tritnum.torch.compress import register_compression
    >>> model = torch.nn.Linear(64, 10)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> handle = register_compression(opt, ratio=16, seed=0)
    >>> model(torch.ones(2, 64)).sum().backward()
    >>> opt.step()  # updates with the compressed gradients
    >>> handle.feedback[0].step, handle.feedback[0].residual.shape
    (1, torch.Size([10, 64]))
    >>> handle.remove()
    """
    seed = draw_seed(seed) % 2**64
    if isinstance(target, torch.optim.Optimizer):
        params = [p for group in target.param_groups for p in group["params"]]
        compression = GradientCompression(params, ratio, seed)
        compression._handles.append(target.register_step_pre_hook(
            lambda optimizer, args, kwargs: compression.apply_all()))
    elif isinstance(target, torch.nn.Module):
        params = list(target.parameters())
        compression = GradientCompression(params, ratio, seed)
        compression._handles.extend(p.register_post_accumulate_grad_hook(compression.apply)
                                    for p in params if p.requires_grad)
    else:
        raise TypeError("register_compression takes a torch.optim.Optimizer or a "
                        f"torch.nn.Module, got {type(target).__name__}")
    return compression


class CompressionState:
    """The state of :func:`ddp_comm_hook`: ratio, seed, process group, residual per bucket.

    Parameters
    ----------
    ratio : float
        Elements per sketch value, >= 1.
    seed : int
        Seed of the run: the same on every rank (sketches with one seed add up).
    process_group : torch.distributed.ProcessGroup, optional
        The group to all-reduce in (the default group if None).

    Attributes
    ----------
    feedback : dict of int to tritnum.ErrorFeedback
        The error feedback of each bucket, by bucket index.

    Raises
    ------
    TypeError
        A seed that is not an int, a ratio that is not a real number.
    ValueError
        A ratio below 1, or not finite.

    Notes
    -----
    Each bucket has its own error feedback; a bucket whose size changes (DDP rebuilds its
    buckets after the first iteration) starts a new one, with a zero residual.
    """

    def __init__(self, ratio: float, seed: int = 0, process_group: Any = None) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int shared by every rank, got {seed!r}")
        _ratio(ratio)
        self.ratio = ratio
        self.seed = seed % 2**64
        self.process_group = process_group
        self.feedback: dict[int, ErrorFeedback] = {}

    def for_bucket(self, index: int, size: int) -> ErrorFeedback:
        """The error feedback of bucket ``index`` holding ``size`` gradient elements.

        Parameters
        ----------
        index : int
            The bucket's index (``GradBucket.index()``).
        size : int
            Gradient elements in the bucket; a size other than the bucket's earlier
            one starts a new error feedback, with a zero residual.

        Returns
        -------
        tritnum.ErrorFeedback
            The bucket's error feedback.
        """
        ef = self.feedback.get(index)
        if ef is None or ef.size not in (None, size):
            ef = self.feedback[index] = _feedback(self.ratio, self.seed, index)
        return ef


def ddp_comm_hook(state: CompressionState,
                  bucket: torch.distributed.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: all-reduce each gradient bucket as a sketch, with error feedback.

    Each rank compresses its bucket plus its residual (:meth:`tritnum.ErrorFeedback.compress`,
    one seed for all ranks), the sketch values divided by the world size are all-reduced,
    and the mean sketch is decompressed (``estimate="projection"``) into the bucket.

    Parameters
    ----------
    state : CompressionState
        Ratio, seed, process group and the buckets' error feedback, the same
        ratio and seed on every rank.
    bucket : torch.distributed.GradBucket
        The gradient bucket DDP hands the hook.

    Returns
    -------
    torch.futures.Future
        Completes with the bucket's buffer, holding the decompressed mean gradient.

    Examples
    --------
    ``model.register_comm_hook(CompressionState(ratio=16, seed=0), ddp_comm_hook)``
    """
    import torch.distributed as dist

    buffer = bucket.buffer()
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    sketch = state.for_bucket(bucket.index(), buffer.numel()).compress(buffer)
    values = sketch.values.div_(dist.get_world_size(group))
    future = dist.all_reduce(values, group=group, async_op=True).get_future()

    def unpack(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        mean = decompress(done.value()[0], sketch.shape, sketch.seed, estimate="projection")
        return buffer.copy_(mean)

    return future.then(unpack)


def _resolve_annotations(hook: Any) -> None:
    """Give ``hook`` its annotations as objects, not strings, so that DDP accepts it.

    ``from __future__ import annotations`` leaves strings, and
    ``DistributedDataParallel.register_comm_hook`` compares the ``bucket`` and return
    annotations with ``dist.GradBucket`` and ``torch.futures.Future[torch.Tensor]``
    themselves and raises ``ValueError`` for anything else (a string included).

    Without ``torch.distributed`` (builds without it) the bucket's annotation is dropped:
    there is no DDP to register with there.
    """
    import torch.distributed as dist

    annotations: dict[str, Any] = {"state": CompressionState}
    if dist.is_available():
        annotations["bucket"] = dist.GradBucket
    annotations["return"] = torch.futures.Future[torch.Tensor]
    hook.__annotations__ = annotations


_resolve_annotations(ddp_comm_hook)
