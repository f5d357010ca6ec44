"""Helpers of the generated (hypothesis) and hostile-input tests: how many cases to generate, the
figures the tests count, and the outcomes they tell apart: featx's own error with a message
(`featx_only`, `refused`), a silent wrong result (`silent`), anything else (an unhandled
exception, recorded and raised).

FEATX_FAULTS=full (what `make faults` sets) generates more cases, and the fault-injection tests
kill more often; tests/faults/conftest.py prints FIGURES at the end of a run that includes
tests/faults."""
from __future__ import annotations

import contextlib
import os
import signal
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from featx.errors import FeatxError

FULL = os.environ.get("FEATX_FAULTS") == "full"
FIGURES: dict = {"kills": [], "bad_inputs": Counter(), "unhandled": [], "silent": [],
                 "checks": defaultdict(int)}


def examples(full: int, quick: int) -> settings:
    """Hypothesis settings: `full` cases under FEATX_FAULTS=full, `quick` otherwise; the same
    cases on every run."""
    return settings(max_examples=full if FULL else quick, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def featx_only(category: str, action, *args):
    """Run `action`; a FeatxError is a handled failure; anything else is recorded and re-raised."""
    FIGURES["bad_inputs"][category] += 1
    try:
        return action(*args)
    except FeatxError as exc:
        assert str(exc).strip(), "an error without a message"
        return None
    except Exception as exc:  # noqa: BLE001 - the point of the test
        FIGURES["unhandled"].append(f"{category}: {type(exc).__name__}: {exc}"[:300])
        raise


def silent(category: str, what: str) -> None:
    FIGURES["silent"].append(f"{category}: {what}"[:300])
    raise AssertionError(f"silent wrong result ({category}): {what}")


def refused(message: str, action, *args, **kwargs):
    """`action` raises a FeatxError whose message matches `message`."""
    with pytest.raises(FeatxError, match=message):
        action(*args, **kwargs)
    FIGURES["checks"][f"refused: {message}"] += 1


@contextlib.contextmanager
def no_hang(seconds: int = 20):
    """What runs inside fails the test after `seconds` instead of hanging it (a read that blocks
    on a FIFO, a regex that backtracks): SIGALRM interrupts even a blocking open."""
    def fail(*_):
        pytest.fail(f"still running after {seconds} s (blocked on a FIFO, or a runaway computation?)")
    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
