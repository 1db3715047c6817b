"""The rescale's last steps, shared by the CPU kernels that keep its order.

Group ``g``'s exact integer sum times its scale goes into float64 slot ``g % SLOTS``
(``_llvm.gemv.SLOTS``); the slots are then summed by halves, as
:func:`._llvm.gemv.make_group_dot` does: the same bits on every int8 path. The bias
comes after, in float32 (:func:`add_bias`), as the packed routes add it.
"""

from __future__ import annotations

from ._jit import jit


@jit(inline="always")
def slot_total(slots):
    """The 8 slots of the int8 rescale summed by halves."""
    return (((slots[0] + slots[4]) + (slots[2] + slots[6]))
            + ((slots[1] + slots[5]) + (slots[3] + slots[7])))


@jit(inline="always")
def add_bias(y, bias):
    """``y += bias`` for every row of ``y``, in float32; an empty ``bias`` is none."""
    if bias.size:
        for r in range(y.shape[0]):
            for o in range(y.shape[1]):
                y[r, o] += bias[o]
