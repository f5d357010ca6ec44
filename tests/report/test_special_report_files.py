"""What the report reads back from its own folders and matplotlib's: a hard link or a FIFO where
matplotlib keeps its font cache is refused (matplotlib would write through the one and block on
the other); another configuration's verdict.json that is a FIFO or a device is left out of the
index, never read."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from featx.report.write import write_report
from tests.finished_project import victim
from tests.generated import no_hang, refused


@pytest.mark.parametrize("kind", ["hardlink", "fifo"])
def test_matplotlibs_font_cache_of_another_kind_is_refused(project, tmp_path, kind):
    write_report(project.runs_dir, project.reports_dir, project.name, project)
    from matplotlib import font_manager

    # The name matplotlib opens (it writes it only where it first builds the cache).
    cache = Path(project.reports_dir) / ".matplotlib" / f"fontlist-v{font_manager.FontManager.__version__}.json"
    cache.unlink(missing_ok=True)
    target = victim(tmp_path)
    os.link(target, cache) if kind == "hardlink" else os.mkfifo(cache)
    with no_hang(60):
        refused("not a file featx made", write_report, project.runs_dir, project.reports_dir, project.name, project)
    assert target.read_text() == "the user's own file\n"


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_another_configurations_verdict_that_is_not_a_file_is_left_out(project, kind):
    write_report(project.runs_dir, project.reports_dir, project.name, project)
    other = Path(project.reports_dir) / project.name / "other"
    other.mkdir()
    os.mkfifo(other / "verdict.json") if kind == "fifo" else (other / "verdict.json").symlink_to("/dev/zero")
    with no_hang(60):
        paths = write_report(project.runs_dir, project.reports_dir, project.name, project)
    assert "other" not in paths["index"].read_text()
