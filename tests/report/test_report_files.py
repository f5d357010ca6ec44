"""Where and how the report writes its files: a report file replaced by a link is never written
through, a full disk (at any write, generated) or a file-size limit leaves the previous report as
it was, and matplotlib's caches stay in the data directory."""
from __future__ import annotations

import dataclasses
import errno
import os
import signal
import subprocess
from pathlib import Path

import pytest

from featx.finetune.stage import run_finetune
from featx.report.write import write_report
from tests.conftest import ROOT
from tests.finished_project import pipeline_toml, victim
from tests.generated import FULL, featx_only, refused, silent


@pytest.mark.parametrize("name", ["report.md", "results.csv", "report.html", "verdict.json", "cost.png",
                                  "index.md", "latest.json"])
def test_report_files_replaced_by_links_are_not_followed(project, tmp_path, name):
    paths = write_report(project.runs_dir, project.reports_dir, project.name, project)
    target = victim(tmp_path)
    planted = (paths["index"] if name in ("index.md", "latest.json") else paths["md"]).parent / name
    before = {p.name: p.read_bytes() for p in planted.parent.iterdir() if p.is_file() and not p.is_symlink()}
    planted.unlink()
    planted.symlink_to(target)
    refused("is a symbolic link", write_report, project.runs_dir, project.reports_dir, project.name, project)
    assert target.read_text() == "the user's own file\n"
    after = {p.name: p.read_bytes() for p in planted.parent.iterdir() if p.is_file() and not p.is_symlink()}
    assert after == {k: v for k, v in before.items() if k != name}  # nothing else was replaced either


def report_files(pipeline) -> dict[str, bytes]:
    """Every report file of the pipeline: each configuration's folder, the index, the pointer."""
    folder = Path(pipeline.reports_dir) / pipeline.name
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def full_disk_after(monkeypatch, writes: int):
    """Every file write after the first `writes` fails as a full disk does (ENOSPC)."""
    from featx import files

    real = files._touch_new
    calls = []

    def touch(path, remove=False):
        calls.append(path)
        if len(calls) > writes:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, remove)
    monkeypatch.setattr(files, "_touch_new", touch)
    return calls


@pytest.mark.slow  # every stage rerun per generated case
def test_a_full_disk_during_the_report_changes_nothing(project, monkeypatch):
    """Generated over the moment the disk fills: the report's files are all the old ones or all
    the new ones, never a mix, and the error is one FeatxError."""
    write_report(project.runs_dir, project.reports_dir, project.name, project)
    old = report_files(project)
    other = dataclasses.replace(project, finetune=dataclasses.replace(project.finetune, seed=1))
    run_finetune(other)  # another configuration: its report goes beside, and the index changes
    moments = range(0, len(old) + 10) if FULL else (0, len(old) // 2, len(old), len(old) + 10)
    for writes in moments:
        with monkeypatch.context() as patch:
            full_disk_after(patch, writes)
            result = featx_only("disk full during the report", write_report, other.runs_dir,
                                other.reports_dir, other.name, other)
        now = report_files(project)
        if result is None and now != old:
            silent("disk full during the report", f"after {writes} writes the old report was changed")
        if result is not None:
            break
    assert report_files(project) != old  # with space, the new configuration's report is written


@pytest.mark.slow  # a featx process under a file-size limit
def test_a_file_size_limit_during_the_report(project, tmp_path):
    import resource
    import sys

    write_report(project.runs_dir, project.reports_dir, project.name, project)
    old = report_files(project)

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
    toml = pipeline_toml(tmp_path, project)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-m", "featx", "report", str(toml), "finetune.seed=3"], env=env,
                            capture_output=True, text=True, timeout=300, preexec_fn=limited)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert report_files(project) == old


def test_report_keeps_matplotlib_caches_in_the_data_directory(tmp_path):
    import sys

    from tests.report.test_report import fake, write_all

    write_all(tmp_path / "runs", [fake("probe", "binary", "mean@6", "logistic", 0.7)])
    home = tmp_path / "home"
    code = ("import os, sys; from featx.report.write import write_report; "
            f"write_report({str(tmp_path / 'runs')!r}, {str(tmp_path / 'reports')!r}, 'fx')")
    env = {k: v for k, v in os.environ.items() if k != "MPLCONFIGDIR"} | {"HOME": str(home)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).resolve().parents[2])
    assert not (home / ".cache" / "matplotlib").exists() and not (home / ".config" / "matplotlib").exists()
    assert (tmp_path / "reports" / ".matplotlib").is_dir()
