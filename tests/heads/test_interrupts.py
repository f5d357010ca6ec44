"""Ctrl-C while a head fits: a library that catches the KeyboardInterrupt itself does not turn it
into a fitted head."""
from __future__ import annotations

import signal

import numpy as np
import pytest


def test_a_library_that_swallows_ctrl_c_does_not_turn_it_into_a_result(ctrl_c):
    from featx.heads import registry as H

    class Swallowing:
        def fit(self, X, y):
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass  # what scikit-learn's MLP does, without even a warning
            return self
    with pytest.raises(KeyboardInterrupt):
        H.fit(Swallowing(), np.zeros((2, 1)), np.zeros(2))
