"""A call nested in another on the same thread (a signal handler's) gets scratch of its own."""

import signal
import time

import numpy as np
import pytest

import tritnum as tn

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no setitimer")


def test_int8_linear_from_a_signal_handler_inside_int8_linear():
    rng = np.random.default_rng(28)
    # a long outer call; a short nested one of the same rows and inputs (the same scratch)
    w = tn.quantize(rng.standard_normal((16384, 2048)).astype(np.float32), axis=-1)
    # past the small layers' one-call route (SMALL_WEIGHTS), which keeps no scratch
    small = tn.quantize(rng.standard_normal((520, 2048)).astype(np.float32), axis=-1)
    x = rng.standard_normal((16, 2048)).astype(np.float32)  # the GEMV's most rows
    other = rng.standard_normal((16, 2048)).astype(np.float32) * 3
    want = tn.linear(x, w, activations="int8", device="numpy")
    want_other = tn.linear(other, small, activations="int8", device="numpy")
    np.testing.assert_array_equal(tn.linear(x, w, activations="int8"), want)
    nested, inside = [], []

    def handler(signum, frame):
        if inside:  # the timer came again during the handler's own call (a busy machine):
            return  # that call is not inside an outer one, and nesting it would recurse
        inside.append(True)
        try:
            nested.append(tn.linear(other, small, activations="int8"))
        finally:
            inside.clear()

    before = signal.signal(signal.SIGALRM, handler)
    outer = []
    try:
        signal.setitimer(signal.ITIMER_REAL, 3e-4, 3e-4)
        end = time.monotonic() + 3
        while time.monotonic() < end and len(outer) < 500:
            outer.append(tn.linear(x, w, activations="int8"))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    assert len(nested) > 10, "the timer did not fire inside the calls"
    bad = sum(not np.array_equal(y, want) for y in outer)
    assert bad == 0, f"{bad} of {len(outer)} interrupted calls differ from the reference"
    bad = sum(not np.array_equal(y, want_other) for y in nested)
    assert bad == 0, f"{bad} of {len(nested)} nested calls differ from the reference"
