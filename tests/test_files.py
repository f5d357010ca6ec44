"""Every file featx writes lands inside the data directory, and only there: never through a link
planted below data_dir (any set of its files, generated, or a folder), never into a read-only
place or where a file stands (one clear error, before any fitting)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from featx.cache.extract import extract
from featx.probe.stage import run_probe
from featx.report.write import write_report
from featx.serve.export import export
from featx.serve.predict import predict_file
from tests.conftest import read_only
from tests.finished_project import runs, victim
from tests.generated import FIGURES, FULL, examples, featx_only, no_hang, refused, silent

FEW = examples(40, 6)


@pytest.fixture
def readonly_dir(tmp_path):
    with read_only(tmp_path / "ro") as folder:
        yield folder


def test_read_only_data_directory(readonly_dir, make_pipeline, csv_dataset):
    pipeline = make_pipeline({"path": str(csv_dataset)}, data_dir=str(readonly_dir / "data"))
    refused("not writable", extract, pipeline)


def test_read_only_run_directory_fails_before_fitting(tmp_path, make_pipeline, csv_dataset):
    pipeline = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "sweep": False})
    extract(pipeline)
    with read_only(pipeline.runs_dir):  # runs/ on a read-only filesystem, the cache beside it writable
        refused("not writable", run_probe, pipeline)


def test_data_directory_that_is_a_file(tmp_path, make_pipeline, csv_dataset):
    (tmp_path / "file").write_text("")
    pipeline = make_pipeline({"path": str(csv_dataset)}, data_dir=str(tmp_path / "file"))
    refused("file stands where", extract, pipeline)


def test_every_write_lands_inside_the_data_directory(make_pipeline, csv_dataset, tmp_path, monkeypatch):
    from featx.finetune.stage import run_finetune

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    before = {p for p in tmp_path.rglob("*")}
    pipeline = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "poolings": ["mean"]},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4], "head_input": "mean"})
    extract(pipeline)
    run_probe(pipeline)
    run_finetune(pipeline)
    write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name)
    data = Path(pipeline.data_dir).resolve()
    created = {p for p in tmp_path.rglob("*")} - before
    outside = [p for p in created if data not in p.resolve().parents and p.resolve() != data]
    assert not outside, outside
    assert not os.listdir(work)
    FIGURES["checks"]["files written, all inside data_dir"] += len(created)


def produced_files(pipeline) -> list[Path]:
    return sorted(p for p in Path(pipeline.data_dir).rglob("*")
                  if p.is_file() and not p.is_symlink() and ".matplotlib" not in p.parts)


def rerun_everything(pipeline, tmp_path: Path) -> None:
    """Every stage once more, each allowed to refuse (the property is about the victim)."""
    for stage in (lambda: extract(pipeline), lambda: run_probe(pipeline),
                  lambda: write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name, pipeline),
                  lambda: predict_file(pipeline, str(Path(pipeline.data.path)), out=None),
                  lambda: export(pipeline, tmp_path / f"export-{len(list(tmp_path.glob('export-*')))}")):
        featx_only("planted links below data_dir", stage)


@pytest.mark.slow  # every stage rerun per generated case
def test_every_file_featx_writes_refuses_a_planted_link(project, tmp_path):
    """Generated: any set of the files featx wrote in data_dir replaced by links to the user's
    files elsewhere; rerunning every stage never changes one of them."""
    write_report(project.runs_dir, project.reports_dir, project.name, project)
    predict_file(project, str(Path(project.data.path)))
    pristine = tmp_path / "pristine"
    shutil.copytree(project.data_dir, pristine, symlinks=True)
    files = [p.relative_to(project.data_dir) for p in produced_files(project)]
    assert len(files) > 20

    @FEW
    @given(chosen=st.sets(st.sampled_from(files), min_size=1, max_size=6))
    def planted(chosen):
        shutil.rmtree(project.data_dir)
        shutil.copytree(pristine, project.data_dir, symlinks=True)
        targets = []
        for i, relative in enumerate(sorted(chosen)):
            target = victim(tmp_path, f"victim-{i}")
            (Path(project.data_dir) / relative).unlink()
            (Path(project.data_dir) / relative).symlink_to(target)
            targets.append(target)
        rerun_everything(project, tmp_path)
        changed = [t.name for t in targets if t.read_text() != "the user's own file\n"]
        if changed:
            silent("planted links below data_dir", f"{sorted(chosen)} written through: {changed}")
    planted()


@pytest.mark.slow  # every stage rerun per generated case
def test_no_file_featx_reads_back_blocks_when_it_is_a_fifo(project, tmp_path):
    """Generated: any set of the files featx wrote in data_dir replaced by FIFOs (named pipes,
    which block whoever opens them for reading until a writer comes); rerunning every stage
    refuses them or works around them, and never waits on one."""
    write_report(project.runs_dir, project.reports_dir, project.name, project)
    pristine = tmp_path / "pristine"
    shutil.copytree(project.data_dir, pristine, symlinks=True)
    files = [p.relative_to(project.data_dir) for p in produced_files(project)]

    @FEW
    @given(chosen=st.sets(st.sampled_from(files), min_size=1, max_size=3))
    def planted(chosen):
        shutil.rmtree(project.data_dir)
        shutil.copytree(pristine, project.data_dir, symlinks=True)
        for relative in chosen:
            (Path(project.data_dir) / relative).unlink()
            os.mkfifo(Path(project.data_dir) / relative)
        with no_hang(120):  # every stage of the tiny project takes seconds
            rerun_everything(project, tmp_path)
    planted()
    FIGURES["checks"]["FIFOs below data_dir: no stage blocks"] += 1


FOLDERS = ["reports/rt", "cache", "runs/rt/KEY/heads"] + (
    ["runs/rt", "predictions", "reports/.matplotlib", "runs/rt/KEY"] if FULL else [])


@pytest.mark.slow  # every stage rerun per generated case
@pytest.mark.parametrize("folder", FOLDERS)
def test_a_folder_link_below_data_dir_is_refused(project, tmp_path, folder):
    key = str(runs(project).relative_to(Path(project.runs_dir) / project.name))  # <cache key>/probe-<hash>
    path = Path(project.data_dir) / folder.replace("KEY", key)
    outside = tmp_path / "outside-folder"
    if path.exists():
        shutil.move(str(path), str(outside))
    else:
        outside.mkdir()
    before = sorted(p.name for p in outside.rglob("*"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(outside, target_is_directory=True)
    rerun_everything(project, tmp_path)
    assert sorted(p.name for p in outside.rglob("*")) == before  # nothing new written out there
    FIGURES["checks"]["folder links below data_dir refused"] += 1
