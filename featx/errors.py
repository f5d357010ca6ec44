"""User-facing errors: one clear message that names the problem and the fix.

The CLI prints a `FeatxError` without a traceback and exits with status 2; anything else is a
bug in featx and keeps its traceback.
"""
from __future__ import annotations

from collections.abc import Iterable


class FeatxError(Exception):
    """A problem with the user's input, configuration or environment (not a featx bug)."""


def check_choice(value, choices: Iterable, what: str):
    """Return `value` if it is one of `choices`, else raise an error that lists them."""
    choices = list(choices)
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise FeatxError(f"unknown {what} {value!r}; choose one of: {listed}")
    return value
