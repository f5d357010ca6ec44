"""User-facing errors: one clear message that names the problem and the fix.

The CLI prints a `FeatxError` without a traceback and exits with status 2; anything else is a
bug in featx and keeps its traceback.
"""
from __future__ import annotations

from collections.abc import Iterable


class FeatxError(Exception):
    """A problem with the user's input, configuration or environment (not a featx bug)."""


def shown(value, limit: int = 80) -> str:
    """repr(value), cut to `limit` characters: an error names what it refuses, never echoes
    50 MB of it."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def check_choice(value, choices: Iterable, what: str):
    """Return `value` if it is one of `choices`, else raise an error that lists them."""
    choices = list(choices)
    try:
        known = value in choices
    except TypeError:  # an unhashable or incomparable value is not a choice either
        known = False
    if not known:
        listed = ", ".join(repr(c) for c in choices)
        raise FeatxError(f"unknown {what} {shown(value)}; choose one of: {listed}")
    return value


class Terminated(BaseException):
    """SIGTERM, raised where a featx command is (featx.cli), as Ctrl-C's KeyboardInterrupt is: a
    BaseException like it, so that `except Exception` passes it on, and not a KeyboardInterrupt,
    which scikit-learn's MLP catches and returns from half-trained."""
