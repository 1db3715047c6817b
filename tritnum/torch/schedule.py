"""The warm-up of gradual quantization: ``QuantSchedule`` sets BitLinear's λ step by step."""

from __future__ import annotations

import math
import operator
from typing import Any

from torch import nn

from .._validate import choice
from .convert import _module, set_quant_lambda

__all__ = ["SHAPES", "QuantSchedule"]

SHAPES = ("linear", "exponential", "sigmoid")


class QuantSchedule:
    """λ of every BitLinear in a model from a warm-up, stepped as a learning-rate scheduler.

    Gradual quantization (:attr:`BitLinear.quant_lambda`) trains on
    ``w + λ (q(w) - w).detach()`` and the same for the activations; the schedule takes
    λ from 0 to 1 over ``warmup_steps`` calls of :meth:`step` (one per optimizer step)
    and keeps it at 1 after. With ``t = step / warmup_steps`` in [0, 1]:

    - ``"linear"``: ``λ = t``;
    - ``"exponential"``: ``λ = (exp(k t) - 1) / (exp(k) - 1)``, slow first, then fast;
    - ``"sigmoid"``: ``1 / (1 + exp(-k (t - 1/2)))`` rescaled to run from 0 to 1.

    ``k`` is ``sharpness``. Making the schedule sets λ for step 0 (0: the float model).
    Eval mode and :func:`export` always use the fully quantized weights, whatever λ.

    Parameters
    ----------
    model : torch.nn.Module
        The model whose BitLinear layers the schedule sets.
    warmup_steps : int
        Steps from λ = 0 to λ = 1 (0: fully quantized from the start).
    shape : {"linear", "exponential", "sigmoid"}
        The curve.
    sharpness : float
        ``k`` of the exponential and sigmoid curves (> 0).

    Attributes
    ----------
    last_step : int
        How many times :meth:`step` was called.

    Examples
    --------
    >>> import torch
    >>> from tritnum.torch import QuantSchedule, convert
    >>> model = convert(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)))
    >>> schedule = QuantSchedule(model, warmup_steps=4)
    >>> [round(schedule.step(), 2) for _ in range(5)]
    [0.25, 0.5, 0.75, 1.0, 1.0]
    >>> model[0].quant_lambda
    1.0
    >>> round(QuantSchedule(model, 4, shape="sigmoid").value(2), 6)
    0.5
    """

    def __init__(self, model: nn.Module, warmup_steps: int, *, shape: str = "linear",
                 sharpness: float = 5.0) -> None:
        self.model = _module(model, "QuantSchedule")
        self.warmup_steps = operator.index(warmup_steps)
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        self.shape = choice(shape, "shape", SHAPES)
        self.sharpness = float(sharpness)
        if not self.sharpness > 0 or math.isinf(self.sharpness):
            raise ValueError(f"sharpness must be a finite number > 0, got {sharpness!r}")
        self.last_step = 0
        set_quant_lambda(self.model, self.value(0))

    def value(self, step: int) -> float:
        """λ at ``step`` (0 at step 0, 1 from ``warmup_steps`` on).

        Parameters
        ----------
        step : int
            The optimizer step, >= 0.

        Returns
        -------
        float
            λ, in [0, 1].
        """
        if step >= self.warmup_steps:
            return 1.0
        t, k = max(step, 0) / self.warmup_steps, self.sharpness
        if self.shape == "linear":
            return t
        if self.shape == "exponential":
            return math.expm1(k * t) / math.expm1(k)
        low, high = (1 / (1 + math.exp(k / 2 * s)) for s in (1, -1))
        return min(max((1 / (1 + math.exp(-k * (t - 0.5))) - low) / (high - low), 0.0), 1.0)

    def step(self) -> float:
        """Advance one step and set λ of every BitLinear; returns the new λ.

        Returns
        -------
        float
            λ now.
        """
        self.last_step += 1
        value = self.value(self.last_step)
        set_quant_lambda(self.model, value)
        return value

    def state_dict(self) -> dict[str, Any]:
        """The schedule's state (its step and settings), as a torch scheduler's.

        Returns
        -------
        dict
            ``last_step``, ``warmup_steps``, ``shape`` and ``sharpness``.
        """
        return {"last_step": self.last_step, "warmup_steps": self.warmup_steps,
                "shape": self.shape, "sharpness": self.sharpness}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`'s output, setting λ for its step.

        Parameters
        ----------
        state_dict : dict
            What :meth:`state_dict` returned.
        """
        self.warmup_steps = operator.index(state_dict["warmup_steps"])
        self.shape = choice(state_dict["shape"], "shape", SHAPES)
        self.sharpness = float(state_dict["sharpness"])
        self.last_step = operator.index(state_dict["last_step"])
        set_quant_lambda(self.model, self.value(self.last_step))
