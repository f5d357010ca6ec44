"""The second red team's scenarios (issue 20), one test each, and a generated test per class that
is wider than the instances: nothing featx reads back runs code, nothing it writes follows a
planted link, nothing is half-written, no silent wrong result, and every bad input is one clear
FeatxError (CLI exit 2)."""
from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import pickle
import re
import shutil
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import featx
from featx.configfile import load_pipeline, pipeline_from_dict
from featx.errors import FeatxError
from featx.export import export
from featx.extract import extract
from featx.finetune import run_finetune
from featx.predict import load_predictor, predict_file
from featx.probe import run_probe
from featx.records import probe_config_hash, read_records
from featx.report import write_report
from featx.verdict import collect
from tests.conftest import ROOT, build_tiny_bert, run_featx, write_rows
from tests.faults.conftest import FIGURES, FULL
from tests.faults.test_hostile import featx_only
from tests.test_finetune import separable_rows

EXAMPLES = 200 if FULL else 20
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
FEW = settings(max_examples=40 if FULL else 6, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

PROBE = {"heads": ["logistic", "mlp"], "poolings": ["mean"], "sweep": False, "baselines": ["majority"],
         "n_jobs": 1}
FINETUNE = {"max_epochs": 1, "learning_rates": [1e-4], "head_input": "pooler"}


def refused(message: str, action, *args, **kwargs):
    with pytest.raises(FeatxError, match=message):
        action(*args, **kwargs)
    FIGURES["checks"][f"red team 2: {message}"] += 1


def silent(category: str, what: str) -> None:
    FIGURES["silent"].append(f"{category}: {what}"[:300])
    raise AssertionError(f"silent wrong result ({category}): {what}")


def make(folder: Path, data_dir: Path, *, name: str = "rt", probe: dict | None = None,
         finetune: dict | None = None, data: dict | None = None):
    return pipeline_from_dict({
        "name": name, "data_dir": str(data_dir), "progress": False,
        "data": {"path": str(folder / "rows.csv"), "id": "id", **(data or {})},
        "model": {"name": str(folder / "bert")}, "probe": PROBE | (probe or {}),
        "finetune": FINETUNE | (finetune or {})})


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A finished project: cache, probe records and heads, a fine-tune (built once per module)."""
    folder = tmp_path_factory.mktemp("red-team-2")
    build_tiny_bert(folder / "bert")
    write_rows(folder / "rows.csv", separable_rows(90))
    pipeline = make(folder, folder / "data")
    extract(pipeline)
    run_probe(pipeline)
    run_finetune(pipeline)
    return folder


@pytest.fixture
def project(built, tmp_path):
    """A copy of the finished project's data directory, for one test to damage."""
    shutil.copytree(built / "data", tmp_path / "data", symlinks=True)
    return make(built, tmp_path / "data")


def runs(pipeline) -> Path:
    """The folder of the pipeline's probe configuration on its (one) cache."""
    return next(Path(pipeline.runs_dir).glob(f"{pipeline.name}/*")) / f"probe-{probe_config_hash(pipeline.probe)}"


def probe_record(pipeline, features="mean@2", head="logistic") -> tuple[Path, dict]:
    path = runs(pipeline) / f"{features}__{head}.json"
    return path, json.loads(path.read_text())


class Marker:
    """A pickle that touches a file when it is loaded: what a crafted head does."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# 1. Code execution


def test_a_pickled_head_in_an_export_runs_no_code(project, tmp_path):
    folder = export(project, tmp_path / "frozen", head="mean@2/logistic")
    manifest = json.loads((folder / "featx-predictor.json").read_text())
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Marker(marker))
    (folder / manifest["head_file"]).write_bytes(payload)  # whoever crafts the folder writes the hash too
    (folder / (manifest["head_file"] + ".sha256")).write_text(json.dumps({"sha256": sha(payload)}))
    (folder / "featx-predictor.json").write_text(json.dumps(manifest | {"head_sha256": sha(payload)}))
    predictor = load_predictor(folder)
    refused("is a pickle", predictor.predict, ["the cat sat"])
    joblib_named = manifest | {"head_file": "head.joblib", "head_sha256": sha(payload)}
    (folder / "head.joblib").write_bytes(payload)
    (folder / "featx-predictor.json").write_text(json.dumps(joblib_named))
    refused("joblib pickle", load_predictor, folder)
    assert not marker.exists()


def test_a_pickled_head_in_a_handed_over_data_directory_runs_no_code(project, tmp_path):
    record_path, record = probe_record(project)
    entry = record["heads"][0]
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Marker(marker))
    (runs(project) / "heads" / entry["file"]).write_bytes(payload)
    record["heads"][0]["sha256"] = sha(payload)  # the crafted record names the crafted head
    record_path.write_text(json.dumps(record))
    refused("is a pickle", predict_file, project, "-", head="mean@2/logistic", out=tmp_path / "p.csv")
    refused("is a pickle", export, project, tmp_path / "out", head="mean@2/logistic")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("out.*"))  # nothing exported
    assert not marker.exists()


@pytest.mark.slow  # a featx process
def test_a_pickled_head_through_the_cli(project, tmp_path, built):
    record_path, record = probe_record(project)
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Marker(marker))
    (runs(project) / "heads" / record["heads"][0]["file"]).write_bytes(payload)
    record["heads"][0]["sha256"] = sha(payload)
    record_path.write_text(json.dumps(record))
    toml = pipeline_toml(tmp_path, project)
    texts = write_rows(tmp_path / "in.csv", [{"id": "a", "text": "the cat sat"}])
    result = run_featx("predict", str(toml), str(texts), "--head", "mean@2/logistic")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "pickle" in result.stderr
    result = run_featx("export", str(toml), str(tmp_path / "bundle"), "--head", "mean@2/logistic")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert not marker.exists() and not (tmp_path / "bundle").exists()


def pipeline_toml(tmp_path: Path, pipeline) -> Path:
    """The pipeline as a TOML file, for the CLI."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)
    lines = [f"name = {value(pipeline.name)}", f"data_dir = {value(pipeline.data_dir)}", "progress = false"]
    for section in ("data", "model", "probe", "finetune"):
        lines.append(f"[{section}]")
        fields = dataclasses.asdict(getattr(pipeline, section))
        defaults = dataclasses.asdict(type(getattr(pipeline, section))(
            **({"path": "x"} if section == "data" else {})))
        lines += [f"{k} = {value(v)}" for k, v in fields.items() if v is not None and v != defaults[k]]
    path = tmp_path / f"{pipeline.name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_old_joblib_heads_are_refused_with_the_command_that_refits_them(project, tmp_path):
    import joblib

    from featx.headfiles import load_head

    record_path, record = probe_record(project)
    heads = runs(project) / "heads"
    old = heads / "mean@2__logistic__seed0.joblib"
    joblib.dump({"a": 1}, old)
    del record["heads"]  # what an older featx wrote: no head named in the record
    record_path.write_text(json.dumps(record))
    refused(r"older featx\)?.*featx probe .*save_heads=true", load_predictor, project, "mean@2/logistic")
    refused("featx probe", load_head, old)


def test_crafted_head_files_never_run_code(project, tmp_path):
    """Generated: crafted head files and documents (random mutations of a real head's JSON, random
    bytes, pickles under the head's name) are refused or rebuild only allowlisted classes."""
    from tests.test_serialize import document, mutate, with_document

    record_path, record = probe_record(project, head="mlp")
    head = runs(project) / "heads" / record["heads"][0]["file"]
    original = head.read_bytes()
    marker = tmp_path / "pwned"

    @SETTINGS
    @given(seed=st.integers(0, 10 ** 9), kind=st.sampled_from(["mutate", "bytes", "pickle", "truncate"]))
    def crafted(seed, kind):
        import random

        rng = random.Random(seed)
        if kind == "mutate":
            doc = document(original)
            mutate(doc["estimator"], rng)
            data = with_document(original, doc)
        elif kind == "bytes":
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
        elif kind == "pickle":
            data = pickle.dumps(Marker(marker), protocol=rng.choice([2, 3, 4, 5]))
        else:
            data = original[:rng.randrange(len(original))]
        head.write_bytes(data)
        record["heads"][0]["sha256"] = sha(data)
        record_path.write_text(json.dumps(record))
        predictor = featx_only("crafted head files", load_predictor, project, "mean@2/mlp")
        if predictor is not None:
            featx_only("crafted head files", predictor.scores, ["the cat sat on the mat"])
        assert not marker.exists(), "a crafted head ran code"
    crafted()


def test_an_export_carries_no_pickled_weights(project, tmp_path, built):
    import torch
    from safetensors.torch import load_file

    folder = export(project, tmp_path / "frozen", head="mean@2/logistic")
    assert not list(folder.rglob("*.bin")) and not list(folder.rglob("*.joblib"))
    weights = folder / "backbone" / "model.safetensors"
    torch.save(load_file(weights), folder / "backbone" / "pytorch_model.bin")
    weights.unlink()  # a handed-over export whose weights are a pickle
    refused("pickled .bin", load_predictor(folder).predict, ["the cat sat"])
    manifest = json.loads((folder / "featx-predictor.json").read_text())
    for key, value in (("head_file", "../../rows.csv"), ("model_path", "/etc"), ("checkpoint", "x.pt"),
                       ("layers", "all"), ("task", "code")):
        (folder / "featx-predictor.json").write_text(json.dumps(manifest | {key: value}))
        refused("not a valid featx manifest|outside the export folder", load_predictor, folder)


# ---------------------------------------------------------------------------------------------
# 2. Writes that follow planted links


def victim(tmp_path: Path, name: str = "victim.txt") -> Path:
    path = tmp_path / "outside" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("the user's own file\n")
    return path


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


@pytest.mark.parametrize("planted", ["lock", "init", "reserve", "write-test", "partial"])
def test_cache_files_replaced_by_links_are_not_followed(built, tmp_path, planted):
    pipeline = make(built, tmp_path / "data", probe={})
    from featx.plan import make_plan

    path = make_plan(pipeline).cache_path("float32")
    path.parent.mkdir(parents=True)
    target = victim(tmp_path)
    name = {"lock": f".{path.name}.lock", "init": f"{path.name}.partial.init", "partial": f"{path.name}.partial",
            "reserve": f".featx-reserve-{os.getpid()}-{threading.get_ident()}", "write-test": f".featx-write-test-{os.getpid()}"}[planted]
    (path.parent / name).symlink_to(target)
    try:
        extract(pipeline)  # a link at a scratch name is removed, never written through
    except FeatxError as exc:
        assert "symbolic link" in str(exc)
        FIGURES["checks"]["red team 2: cache links refused"] += 1
    assert target.read_text() == "the user's own file\n"


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
    FIGURES["checks"]["red team 2: folder links below data_dir refused"] += 1


def test_predictions_to_a_link_are_refused(project, tmp_path):
    target = victim(tmp_path)
    out = tmp_path / "p.csv"
    out.symlink_to(target)
    refused("symbolic link", predict_file, project, str(project.data.path), out=out)
    assert target.read_text() == "the user's own file\n"


# ---------------------------------------------------------------------------------------------
# 3. Data lost or half-written


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
    import subprocess
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


def test_a_full_disk_during_an_export_leaves_nothing_and_the_retry_works(project, tmp_path, monkeypatch):
    real = shutil.copyfile
    copies = []

    def copyfile(source, target, **kw):
        copies.append(source)
        if len(copies) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        return real(source, target, **kw)
    monkeypatch.setattr(shutil, "copyfile", copyfile)
    out = tmp_path / "bundle"
    refused("disk is full.*nothing was written", export, project, out, head="mean@2/logistic")
    assert not out.exists() and not list(tmp_path.glob("bundle*"))
    monkeypatch.setattr(shutil, "copyfile", real)
    texts = ["the cat sat on the mat"]
    np.testing.assert_allclose(load_predictor(export(project, out, head="mean@2/logistic")).scores(texts),
                               load_predictor(project, "mean@2/logistic").scores(texts))


def test_a_partial_export_is_named_and_the_next_export_replaces_it(project, tmp_path):
    from featx.export import PARTIAL_MARK
    from featx.manifest import PARTIAL

    out = tmp_path / "bundle"
    partial = tmp_path / f"bundle{PARTIAL}"
    partial.mkdir()
    (partial / PARTIAL_MARK).write_text("")
    (partial / "model.safetensors").write_bytes(b"truncated")  # what a killed export leaves
    refused("is a partial export", load_predictor, partial)
    assert export(project, out, finetuned=True) == out and not partial.exists()
    assert (out / "featx-predictor.json").is_file()
    stranger = tmp_path / f"other{PARTIAL}"
    stranger.mkdir()
    (stranger / "keep.txt").write_text("not featx's")
    refused("not a partial featx export", export, project, tmp_path / "other", finetuned=True)
    assert (stranger / "keep.txt").is_file()


# ---------------------------------------------------------------------------------------------
# 4. Silent wrong results


def test_a_record_without_its_head_never_pairs_with_another_runs_head(project):
    first = load_predictor(project, "mean@2/logistic").scores(["the cat sat"])
    other = dataclasses.replace(project, probe=dataclasses.replace(project.probe, heads=("logistic",),
                                                                      save_heads=False, folds=3, protocol="cv"))
    run_probe(other)  # in its own folder: the first configuration's records and heads stay
    refused("save_heads = false", load_predictor, other, "mean@2/logistic")
    np.testing.assert_array_equal(load_predictor(project, "mean@2/logistic").scores(["the cat sat"]), first)
    assert first.shape == (1, 3)


def test_a_probe_killed_between_saving_heads_and_writing_records(project, monkeypatch):
    from featx import probe

    from featx.records import run_status_path

    expected = load_predictor(project, "mean@2/logistic").scores(["the cat sat"])
    status = run_status_path(runs(project))  # an unfinished run of this configuration: fitted again
    status.write_text(json.dumps(json.loads(status.read_text()) | {"finished": False}))

    real = probe.write_record

    def killed(directory, record, predictions=None):
        if record.head == "logistic":
            raise KeyboardInterrupt  # the moment after the logistic head was saved, before its record
        return real(directory, record, predictions)
    monkeypatch.setattr(probe, "write_record", killed)
    with pytest.raises(KeyboardInterrupt):
        run_probe(project)
    refused("not the head its record names", load_predictor(project, "mean@2/logistic").scores, ["the cat sat"])
    monkeypatch.undo()
    run_probe(project)  # the fix it names
    np.testing.assert_allclose(load_predictor(project, "mean@2/logistic").scores(["the cat sat"]), expected)


def test_predict_refuses_the_default_head_of_an_interrupted_probe(project, caplog):
    import logging

    from featx.records import run_status_path

    status = run_status_path(runs(project))
    status.write_text(json.dumps(json.loads(status.read_text()) | {"finished": False, "planned": 9}))
    refused("interrupted", load_predictor, project)
    with caplog.at_level(logging.WARNING, logger="featx"):
        assert load_predictor(project, "mean@2/logistic")  # a head named by hand: said, not refused
    assert "interrupted" in caplog.text
    # a later run of another configuration does not hide it
    other = dataclasses.replace(project, probe=dataclasses.replace(project.probe, heads=("logistic",), metric="mcc"))
    run_probe(other)
    refused("interrupted", load_predictor, project)


@pytest.fixture
def ctrl_c():
    """Python's own Ctrl-C handler, even where the test process was started with SIGINT ignored
    (a background job of a non-interactive shell): these tests raise a real SIGINT."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_during_the_mlp_interrupts(project, monkeypatch, ctrl_c):
    from sklearn.neural_network import MLPClassifier

    real = MLPClassifier._backprop
    calls = []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C, in the middle of scikit-learn's loop
        return real(self, *args, **kwargs)
    monkeypatch.setattr(MLPClassifier, "_backprop", interrupted)
    mlp_record = runs(project) / "mean@2__mlp.json"
    before = mlp_record.read_bytes()
    other = dataclasses.replace(project, probe=dataclasses.replace(project.probe, metric="macro_f1"))
    with pytest.raises(KeyboardInterrupt):
        run_probe(other)
    assert json.loads((runs(other) / "run.json").read_text())["finished"] is False
    assert mlp_record.read_bytes() == before  # no record of the interrupted fit
    FIGURES["checks"]["red team 2: Ctrl-C in the MLP interrupts"] += 1


def test_a_library_that_swallows_ctrl_c_does_not_turn_it_into_a_result(ctrl_c):
    from featx import heads as H

    class Swallowing:
        def fit(self, X, y):
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass  # what scikit-learn's MLP does, without even a warning
            return self
    with pytest.raises(KeyboardInterrupt):
        H.fit(Swallowing(), np.zeros((2, 1)), np.zeros(2))


def edit_in_place(path: Path, old: str, new: str) -> None:
    """Change bytes of a file, keeping its size and modification time (cp -p, rsync -a, tar x)."""
    assert len(old) == len(new)
    stat = path.stat()
    data = path.read_bytes()
    assert old.encode() in data
    path.write_bytes(data.replace(old.encode(), new.encode(), 1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_a_data_file_edited_in_place_with_size_and_mtime_kept(built, tmp_path):
    data = tmp_path / "rows.csv"
    shutil.copy(built / "rows.csv", data)
    shutil.copytree(built / "data", tmp_path / "data", symlinks=True)
    pipeline = dataclasses.replace(make(built, tmp_path / "data"),
                                   data=dataclasses.replace(make(built, tmp_path).data, path=str(data)))
    extract(pipeline)  # a cache (and pointer) for this copy of the data
    run_probe(pipeline)
    first = data.read_text().splitlines()[1].split(",")[1].split()[0]
    edit_in_place(data, first, first[::-1] if first[::-1] != first else "x" * len(first))
    refused("no cache for pipeline", run_probe, pipeline)
    refused("no cache for pipeline", featx.open_cache, pipeline=pipeline)
    refused("no cache for pipeline", load_predictor, pipeline)
    caution = collect(pipeline.runs_dir, pipeline.name, pipeline).caution  # the verdict leads with it
    assert "no cache" in caution and "changed since these records were made" in caution


def test_data_edited_in_place_never_reuses_the_stale_cache(built, tmp_path):
    """Generated: any same-length edit of the data file, size and mtime kept, and the cache it
    had is never the one a later stage finds."""
    from featx.plan import find_cache

    data = tmp_path / "rows.csv"
    shutil.copy(built / "rows.csv", data)
    pipeline = dataclasses.replace(make(built, tmp_path / "data"),
                                   data=dataclasses.replace(make(built, tmp_path).data, path=str(data)))
    stale = extract(pipeline).path
    original = data.read_bytes()

    @SETTINGS
    @given(at=st.integers(0, 10 ** 6), byte=st.sampled_from(b"abcdefgxyz"))
    def edited(at, byte):
        position = original.index(b"\n") + 1 + at % (len(original) - original.index(b"\n") - 2)
        if original[position:position + 1] in (b",", b"\n", b"\r", bytes([byte])):
            return
        stat = data.stat()
        data.write_bytes(original[:position] + bytes([byte]) + original[position + 1:])
        os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        found = featx_only("data edited in place", find_cache, pipeline)
        if found == stale:
            silent("data edited in place", f"byte {position} changed, the stale cache was used")
        data.write_bytes(original)
        os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    edited()


def test_parquet_list_labels_and_boolean_labels(tmp_path):
    import pandas as pd

    from featx.config import DataConfig
    from featx.data import load_dataset

    labels = [["a", "b"], ["b"], [], ["c", "a"], ["a"], ["b", "c"]] * 5
    frame = pd.DataFrame({"text": [f"text {i}" for i in range(30)], "label": labels})
    frame.to_parquet(tmp_path / "ml.parquet")
    data = load_dataset(DataConfig(path=str(tmp_path / "ml.parquet")))
    assert data.task == "multilabel" and data.label_names == ("a", "b", "c")
    frame.assign(label=[[i % 3, (i + 1) % 3] for i in range(30)]).to_parquet(tmp_path / "ids.parquet")
    data = load_dataset(DataConfig(path=str(tmp_path / "ids.parquet"), task="multilabel"))
    assert data.label_names == ("0", "1", "2")
    booleans = [bool(i % 2) for i in range(30)]
    frame.assign(label=booleans).to_parquet(tmp_path / "bool.parquet")
    write_rows(tmp_path / "bool.jsonl", [{"text": f"t {i}", "label": b} for i, b in enumerate(booleans)])
    write_rows(tmp_path / "bool.csv", [{"text": f"t {i}", "label": b} for i, b in enumerate(booleans)])
    for name in ("bool.parquet", "bool.jsonl", "bool.csv"):
        data = load_dataset(DataConfig(path=str(tmp_path / name)))
        assert data.task == "binary" and data.label_names == ("False", "True"), name


@SETTINGS
@given(values=st.lists(st.one_of(st.booleans(), st.integers(0, 3), st.sampled_from(["x", "y", ""])),
                       min_size=6, max_size=30),
       form=st.sampled_from(["list<string>", "list<int>", "bool", "scalar"]))
def test_parquet_cells_are_read_as_values(tmp_path, values, form):
    """Generated: a Parquet label column of lists, integers or booleans reads as the same task and
    label names as the same rows in JSONL; never as the text of a numpy array."""
    import pandas as pd

    from featx.config import DataConfig
    from featx.data import load_dataset

    if form == "list<string>":
        labels = [[str(v) for v in values[i:i + 2] if str(v)] for i in range(len(values))]
    elif form == "list<int>":
        labels = [[int(v) for v in values[i:i + 2] if isinstance(v, int) and not isinstance(v, bool)]
                  for i in range(len(values))]
    elif form == "bool":
        labels = [bool(v) for v in values]
    else:
        labels = [str(v) or "z" for v in values]
    rows = [{"text": f"text {i}", "label": label} for i, label in enumerate(labels)]
    pd.DataFrame(rows).to_parquet(tmp_path / "cells.parquet")
    write_rows(tmp_path / "cells.jsonl", rows)
    task = "multilabel" if form.startswith("list") else None
    parquet = featx_only("Parquet cells", load_dataset, DataConfig(path=str(tmp_path / "cells.parquet"), task=task))
    jsonl = featx_only("Parquet cells", load_dataset, DataConfig(path=str(tmp_path / "cells.jsonl"), task=task))
    if (parquet is None) != (jsonl is None):
        silent("Parquet cells", f"{form}: Parquet and JSONL of the same rows disagree on being valid")
    if parquet is not None:
        if (parquet.task, parquet.label_names) != (jsonl.task, jsonl.label_names):
            silent("Parquet cells", f"{form}: {parquet.task} {parquet.label_names} vs {jsonl.task} {jsonl.label_names}")
        if any("[" in name or "array" in name for name in parquet.label_names):
            silent("Parquet cells", f"a numpy array's text became a label: {parquet.label_names}")


def test_r2_interval_on_three_rows():
    from featx import bootstrap

    y = np.array([[1.0], [2.0], [3.5]])
    scores = np.array([[1.2], [2.1], [2.9]])
    low, high = bootstrap.intervals("regression", y, scores[None])["r2"]
    assert np.isnan(low) and np.isnan(high)  # three rows are too few for an interval


@SETTINGS
@given(n=st.integers(5, 40), scale=st.sampled_from([1e-6, 1.0, 1e3, 1e6]), offset=st.sampled_from([0.0, 1e4, -1e8]),
       seed=st.integers(0, 1000))
def test_bootstrap_r2_is_exact_on_every_resample(n, scale, offset, seed):
    """Generated: targets of any scale and offset, few rows (resamples that draw one value);
    every resample's r2 equals the exact r2 (rational arithmetic) of the rows it drew: no
    cancellation noise (scikit-learn's own one-resample r2 is off by 2% at offset 1e8, scale 1e-6)."""
    from fractions import Fraction

    from featx import bootstrap

    FIGURES["bad_inputs"]["r2 on few rows"] += 1
    rng = np.random.default_rng(seed)
    y = offset + scale * rng.normal(size=(n, 1))
    scores = y + scale * 0.5 * rng.normal(size=(n, 1))
    W = bootstrap.counts(n, 30, rng)
    ours = bootstrap.metric_samples("regression", W, y, scores[None])["r2"]
    for w, value in zip(W, ours):
        rows = np.repeat(np.arange(n), w.astype(int))
        truth = [Fraction(float(v)) for v in y[rows, 0]]
        guess = [Fraction(float(v)) for v in scores[rows, 0]]
        mean = sum(truth) / len(truth)
        total = sum((t - mean) ** 2 for t in truth)
        residual = sum((t - g) ** 2 for t, g in zip(truth, guess))
        exact = float(1 - residual / total) if total else (1.0 if residual == 0 else 0.0)
        if not np.isclose(value, exact, rtol=1e-7, atol=1e-9):
            silent("r2 on few rows", f"n={n} scale={scale} offset={offset}: {value}, exactly {exact}")


def test_an_unknown_output_suffix_is_refused_before_any_work(project, tmp_path, monkeypatch):
    from featx.predict import Predictor

    monkeypatch.setattr(Predictor, "scores", lambda *a, **k: pytest.fail("embedded before checking --out"))
    refused(r"\.xlsx is none of them", predict_file, project, str(project.data.path), out=tmp_path / "p.xlsx")
    assert not (tmp_path / "p.xlsx").exists()


# ---------------------------------------------------------------------------------------------
# 5. Tracebacks that are now one clear error


def test_export_to_a_file_under_a_file_or_an_unwritable_place(project, tmp_path):
    from tests.faults.test_red_team import read_only

    (tmp_path / "a-file").write_text("")
    refused("exists and is a file", export, project, tmp_path / "a-file", head="mean@2/logistic")
    refused("a-file' is a file", export, project, tmp_path / "a-file" / "out", head="mean@2/logistic")
    with read_only(tmp_path / "ro") as folder:
        refused("not writable", export, project, folder / "out", head="mean@2/logistic")


NESTED = ["a = " + "[" * 5000 + "]" * 5000, "a = " + "{b = " * 5000 + "1" + "}" * 5000,
          "[data]\npath = 'x'\n[t]\nx = " + "[" * 3000 + "1" + "]" * 3000]


@pytest.mark.parametrize("text", NESTED, ids=["arrays", "inline tables", "in a section"])
def test_a_pipeline_nested_thousands_deep(tmp_path, text):
    path = tmp_path / "deep.toml"
    path.write_text(text)
    refused("nested too deeply|not valid TOML", load_pipeline, path)
    refused("nested too deeply", load_pipeline, "pipelines/trec.toml", ["data.max_rows=" + "[" * 5000 + "]" * 5000])


@SETTINGS
@given(depth=st.integers(50, 20000), kind=st.sampled_from(["[", "{\"a\": "]),
       where=st.sampled_from(["pipeline", "override", "jsonl", "record", "run status", "pointer", "manifest"]))
def test_deep_nesting_anywhere_featx_parses(tmp_path, depth, kind, where):
    """Generated: JSON or TOML nested to any depth in every file featx parses: one clear error
    or a correct result, never a RecursionError."""
    close = "]" if kind == "[" else "}"
    deep_json = kind * depth + "1" + close * depth
    folder = tmp_path / f"deep-{where}-{depth}-{len(kind)}"
    folder.mkdir(exist_ok=True)
    if where == "pipeline":
        toml = "a = " + ("[" * depth + "]" * depth if kind == "[" else "{b = " * depth + "1" + "}" * depth)
        (folder / "p.toml").write_text(toml)
        featx_only("deep nesting", load_pipeline, folder / "p.toml")
    elif where == "override":
        featx_only("deep nesting", load_pipeline, "pipelines/trec.toml", [f"data.max_rows={'[' * depth}{']' * depth}"])
    elif where == "jsonl":
        from featx.config import DataConfig
        from featx.data import load_dataset

        (folder / "d.jsonl").write_text(f'{{"text": "a", "label": {deep_json}}}\n' * 4)
        featx_only("deep nesting", load_dataset, DataConfig(path=str(folder / "d.jsonl")))
    elif where == "record":
        (folder / "probe-abc").mkdir()
        (folder / "probe-abc" / "r.json").write_text(deep_json)
        featx_only("deep nesting", read_records, folder)
    elif where == "run status":
        from featx.records import probe_interrupted

        (folder / "run.json").write_text(deep_json)
        featx_only("deep nesting", probe_interrupted, folder, "abc")
    elif where == "pointer":
        from featx.plan import find_cache

        pipeline = pipeline_from_dict({"name": "p", "data_dir": str(folder), "data": {"path": str(folder / "none.csv")}})
        pipeline.cache_dir.mkdir(parents=True)
        (pipeline.cache_dir / "p.pointer.json").write_text(deep_json)
        featx_only("deep nesting", find_cache, pipeline)
    else:
        (folder / "featx-predictor.json").write_text(deep_json)
        featx_only("deep nesting", load_predictor, folder)


@pytest.mark.parametrize("override", ["probe.seeds=[-1]", "probe.seeds=[12345678901234567890]", "data.split_seed=-1",
                                      "finetune.seed=-1", "model.seed=-1", "probe.mteb_seed=99999999999",
                                      "extract.threads=100000", "extract.max_length=100000000000000000000",
                                      "data.max_rows=99999999999999999999"])
def test_seeds_and_counts_beyond_any_sensible_value(override):
    refused("seed from 0|beyond any sensible value|more threads", load_pipeline, "pipelines/trec.toml", [override])


FIELDS = [(section, f.name) for section, cls in (("data", "DataConfig"), ("model", "ModelConfig"),
                                                  ("extract", "ExtractConfig"), ("probe", "ProbeConfig"),
                                                  ("finetune", "FinetuneConfig"))
          for f in dataclasses.fields(getattr(__import__("featx.config", fromlist=[cls]), cls))]


@SETTINGS
@given(field=st.sampled_from(FIELDS), value=st.one_of(
    st.integers(-2 ** 70, 2 ** 70), st.sampled_from([-1, 0, 2 ** 31, 2 ** 32, 2 ** 63, -(2 ** 63), 10 ** 20]),
    st.lists(st.integers(-2 ** 40, 2 ** 40), min_size=0, max_size=3)))
def test_any_integer_in_any_field(field, value):
    """Generated: any integer (or list of them) in any pipeline field: a config that validates,
    or one clear error; a seed that validates is one numpy and scikit-learn accept."""
    section, name = field
    config = featx_only("integers in config fields", load_pipeline, "pipelines/trec.toml",
                        [f"{section}.{name}={json.dumps(value)}"])
    if config is None:
        return
    chosen = getattr(getattr(config, section), name)
    for seed in (chosen if isinstance(chosen, tuple) else (chosen,)) if name.endswith(("seed", "seeds")) else ():
        np.random.RandomState(seed)  # a ValueError here would be a traceback later


def test_a_regression_probe_with_more_folds_than_rows(built, tmp_path):
    rows = [{"id": f"r{i}", "text": " ".join(["cat", "dog", "sat"][: 1 + i % 3]), "y": float(i)} for i in range(8)]
    rows = [r | {"split": "test" if i >= 6 else "train"} for i, r in enumerate(rows)]
    write_rows(tmp_path / "reg.csv", rows)
    pipeline = pipeline_from_dict({"name": "reg", "data_dir": str(tmp_path / "data"), "progress": False,
                                   "data": {"path": str(tmp_path / "reg.csv"), "label": "y", "task": "regression",
                                            "split_column": "split"},
                                   "model": {"name": str(built / "bert")},
                                   "probe": {"heads": ["logistic"], "sweep": False, "baselines": [], "folds": 10,
                                             "n_jobs": 1}})
    extract(pipeline)
    refused("probe.folds = 10 with 6 training rows leaves a fold of one row", run_probe, pipeline)


def test_predictions_holding_an_object_array(project, tmp_path):
    from featx.records import read_predictions, read_record

    record_path, record = probe_record(project)
    scores = runs(project) / record["predictions"]["file"]
    with open(scores, "wb") as f:
        np.savez(f, ids=np.array(["a"], dtype=object), labels=np.array([0]), scores=np.zeros((1, 1, 3)),
                 threshold=np.float64(0.5))
    record["predictions"]["sha256"] = sha(scores.read_bytes())  # crafted with its hash
    record_path.write_text(json.dumps(record))
    refused("not a featx predictions file", read_predictions, runs(project), read_record(record_path))
    paths = write_report(project.runs_dir, project.reports_dir, project.name, project)  # no traceback
    assert paths["md"].is_file()


@SETTINGS
@given(arrays=st.dictionaries(st.sampled_from(["ids", "labels", "scores", "threshold", "x"]), st.sampled_from([
    "object", "strings", "ints", "floats3", "floats2", "scalar", "empty"]), max_size=5))
def test_crafted_predictions_files(tmp_path, arrays):
    """Generated: a predictions file of any arrays (object arrays, wrong types and shapes,
    missing ones) with a matching hash in its record: read back correctly or refused."""
    from featx.records import read_predictions
    from tests.test_report import fake

    made = {"object": np.array([{"a": 1}], dtype=object), "strings": np.array(["a", "b"]),
            "ints": np.arange(2), "floats3": np.zeros((1, 2, 3)), "floats2": np.zeros((2, 3)),
            "scalar": np.float64(0.5), "empty": np.zeros(0)}
    folder = tmp_path / f"p{len(list(tmp_path.iterdir()))}"
    folder.mkdir(parents=True)
    with open(folder / "x.scores.npz", "wb") as f:
        np.savez(f, **{k: made[v] for k, v in arrays.items()})
    record = fake("probe", "binary", "mean@2", "logistic", 0.7,
                  predictions={"file": "x.scores.npz", "sha256": sha((folder / "x.scores.npz").read_bytes())})
    featx_only("crafted predictions files", read_predictions, folder, record)


@pytest.mark.parametrize("texts", [[], None, "", 3, [None], b"bytes"])
def test_embed_and_predict_on_no_text(project, texts):
    refused("texts", featx.embed, texts, model=str(Path(project.model.name)))
    refused("texts", load_predictor(project, "mean@2/logistic").predict, texts)


# ---------------------------------------------------------------------------------------------
# 6. Errors that named the wrong problem or no fix


def load(path: Path, **data):
    from featx.config import DataConfig
    from featx.data import load_dataset

    return load_dataset(DataConfig(path=str(path), **data))


def csv_text(rows: int = 20, sep: str = ",", header: str | None = None) -> str:
    lines = [header or sep.join(["text", "label"])]
    lines += [sep.join([f"text number {i}", "ab"[i % 2]]) for i in range(rows)]
    return "\n".join(lines) + "\n"


def test_utf16_data_is_named(tmp_path):
    path = tmp_path / "u16.csv"
    path.write_bytes(csv_text().encode("utf-16"))  # with its byte-order mark FF FE
    assert load(path).label_names == ("a", "b")  # the mark says what it is
    refused('set data.encoding = "utf-16"', load, path, encoding="latin-1")
    path.write_bytes(csv_text().encode("utf-16-le"))  # no mark
    refused("UTF-16", load, path)


def test_a_semicolon_separated_csv_gets_the_delimiter_named(tmp_path):
    path = tmp_path / "semi.csv"
    path.write_text(csv_text(sep=";"))
    refused('data.delimiter = ";"', load, path)
    assert load(path, delimiter=";").label_names == ("a", "b")
    tabs = tmp_path / "tabs.csv"
    tabs.write_text(csv_text(sep="\t"))
    refused(r'data.delimiter = "\\t"', load, tabs)
    assert load(tabs, delimiter="\\t").label_names == ("a", "b")


def test_empty_trailing_header_cells_are_ignored(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_text("text,label,,\n" + "".join(f"text number {i},{'ab'[i % 2]},,\n" for i in range(20)))
    assert len(load(path).splits["train"]) > 10
    path.write_text("text,label,,\n" + "".join(f"text number {i},{'ab'[i % 2]},,{'x' if i == 5 else ''}\n"
                                                 for i in range(20)))
    refused("whose header cell is empty", load, path)


def test_a_multilabel_csv_row_with_no_labels(tmp_path):
    rows = [{"text": f"text {i}", "label": ["a,b", "b", "", "c"][i % 4]} for i in range(40)]
    data = load(write_rows(tmp_path / "ml.csv", rows), label_sep=",")
    assert data.task == "multilabel" and data.label_names == ("a", "b", "c")
    empty = [i for i, t in enumerate(data.splits["train"].texts) if int(t.split()[1]) % 4 == 2]
    assert empty and not data.splits["train"].labels[empty].any()
    refused("label is empty", load, write_rows(tmp_path / "mc.csv", rows), label_sep=",", task="multiclass")


def test_a_catastrophic_label_regex_stops_with_a_message(tmp_path):
    rows = [{"text": f"text {i}", "label": "a" * 40 + "!"} for i in range(4)]
    refused("backtracks catastrophically", load, write_rows(tmp_path / "re.csv", rows), label_regex="^((?:a|aa)+)$")


def test_data_path_and_pipeline_file_that_are_folders(tmp_path, monkeypatch):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "train.csv").write_text(csv_text())
    refused("is a folder, not a file.*train.csv", load, tmp_path / "folder")
    refused("is a folder, not a pipeline file", load_pipeline, tmp_path / "folder")
    monkeypatch.chdir(tmp_path)
    refused("no pipelines/ folder", load_pipeline, tmp_path / "missing.toml")


def test_a_pipeline_saved_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + b'name = "bom"\n[data]\nbuiltin = "trec"\n')
    assert load_pipeline(path).name == "bom"


@SETTINGS
@given(field=st.sampled_from(["name", "data.text", "data.label", "data.format", "extract.device", "probe.protocol",
                              "data.encoding", "data.nope", "model.init", "finetune.search"]),
       size=st.sampled_from([200, 10_000, 5_000_000]))
def test_huge_values_are_never_echoed_in_full(tmp_path, field, size):
    """Generated: a huge value (up to 5 MB) in any field: the error names it in a line, not in
    megabytes."""
    value = "x" * size
    path = tmp_path / f"huge-{field}-{size}.toml"
    path.write_text(f'name = "ok"\n[data]\npath = "{tmp_path / "none.csv"}"\n')
    FIGURES["bad_inputs"]["huge values in messages"] += 1
    try:
        pipeline = load_pipeline(path, [f"{field}={value}"])
        featx.open_cache(pipeline=pipeline)
    except FeatxError as exc:
        if len(str(exc)) > 2000:
            silent("huge values in messages", f"{field}: a {len(str(exc)):,}-character message")


def test_a_fine_tune_of_another_configuration_is_named_with_its_overrides(project):
    other = dataclasses.replace(project, finetune=dataclasses.replace(project.finetune, weight_decay=0.05))
    with pytest.raises(FeatxError, match="finetune.weight_decay=0.01") as caught:
        load_predictor(other, finetuned=True)
    FIGURES["checks"]["red team 2: the override that selects another fine-tune"] += 1
    override = re.search(r"finetune\.weight_decay=[0-9.]+[0-9]", str(caught.value)).group(0)
    chosen = load_pipeline(pipeline_toml(project.root.parent, other), [override])
    assert load_predictor(chosen, finetuned=True).manifest.kind == "finetuned"


def test_overrides_after_a_flag(project, tmp_path, capsys):
    from featx.cli import main

    toml = pipeline_toml(tmp_path, project)
    texts = write_rows(tmp_path / "in.csv", [{"id": "a", "text": "the cat sat"}])
    assert main(["predict", str(toml), str(texts), "--finetuned", "--out", str(tmp_path / "o.csv"),
                 "progress=false"]) == 0
    assert main(["predict", str(toml), str(texts), "--head", "mean@2/logistic", "finetune.seed=0",
                 "--out", str(tmp_path / "o.jsonl")]) == 0


def test_an_unwritable_output_fails_before_embedding(project, tmp_path, monkeypatch):
    from featx.predict import Predictor
    from tests.faults.test_red_team import read_only

    monkeypatch.setattr(Predictor, "scores", lambda *a, **k: pytest.fail("embedded before checking --out"))
    with read_only(tmp_path / "ro") as folder:
        refused("not writable", predict_file, project, str(project.data.path), out=folder / "p.csv")
    refused("is a folder", predict_file, project, str(project.data.path), out=tmp_path)


def test_a_text_file_of_lines_says_how_to_pass_lines(project, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("the cat sat\nthe dog ran\n")
    refused("pass it on stdin: featx predict PIPELINE - <", predict_file, project, str(lines))


def test_predict_shows_its_progress(project, tmp_path, monkeypatch, caplog):
    import logging

    from featx import progress

    monkeypatch.setattr(progress, "LOG_EVERY", 0.0)  # a progress line at every update
    noisy = dataclasses.replace(project, progress=True)
    for kind in ({"head": "mean@2/logistic"}, {"finetuned": True}):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="featx"):
            predict_file(noisy, str(project.data.path), out=tmp_path / "p.csv", **kind)
        assert any("text" in r.getMessage() and "/" in r.getMessage() for r in caplog.records
                   if "predicted" not in r.getMessage()), kind


def test_predictions_never_overwrite_the_input_or_featx_files(project, tmp_path):
    data = tmp_path / "in.csv"
    shutil.copy(project.data.path, data)
    before = data.read_bytes()
    refused("is the input file", predict_file, project, str(data), out=data)
    record, _ = probe_record(project)
    refused("where featx keeps its own files", predict_file, project, str(data), out=record)
    assert data.read_bytes() == before and json.loads(record.read_text())["stage"] == "probe"


@pytest.mark.parametrize("special", ["/dev/null", "/dev/zero"])
def test_a_data_path_that_is_a_device(special):
    refused("not a regular file", load, Path(special))


API = {"model": st.one_of(st.none(), st.integers(), st.just(""), st.just("no/such/model")),
       "layer": st.one_of(st.none(), st.floats(allow_nan=True), st.booleans(), st.just([]), st.just("first"),
                          st.lists(st.integers(-9, 9), max_size=3), st.integers(-50, 50)),
       "max_length": st.one_of(st.integers(-5, 5), st.floats(), st.just(10 ** 30), st.none()),
       "device": st.one_of(st.just("tpu"), st.integers(), st.just("cuda:x"), st.just("cpu")),
       "dtype": st.one_of(st.just("float8"), st.none(), st.just("float32")),
       "pooling": st.one_of(st.just("median"), st.none(), st.just("cls"), st.just("pooler"))}


@FEW
@given(options=st.fixed_dictionaries({}, optional=API), pairs=st.sampled_from([None, [], ["a"], ["a", "b"]]))
def test_embed_with_any_arguments(project, options, pairs):
    """Generated: every keyword of featx.embed with a wrong type or value: vectors or one clear
    error."""
    options = {"model": str(project.model.name)} | options
    featx_only("embed arguments", lambda: featx.embed(["the cat sat", "the dog ran"], pairs, **options))


@SETTINGS
@given(pipeline=st.one_of(st.none(), st.integers(), st.just(b"x"), st.just("no-such.toml")),
       head=st.one_of(st.none(), st.integers(), st.just("mean@2"), st.just("x/y"), st.just([])),
       finetuned=st.one_of(st.booleans(), st.just("yes"), st.none()))
def test_load_predictor_with_any_arguments(project, pipeline, head, finetuned):
    """Generated: load_predictor and open_cache with wrong types: one clear error."""
    featx_only("predictor arguments", lambda: load_predictor(project if pipeline is None else pipeline, head,
                                                             finetuned=finetuned))
    featx_only("predictor arguments", featx.open_cache, pipeline)


@pytest.mark.slow  # a featx process, killed
def test_predict_after_a_probe_killed_by_sigkill(project, tmp_path):
    import time

    other = dataclasses.replace(project, probe=dataclasses.replace(project.probe, metric="macro_f1", baselines=("majority", "tfidf")))
    toml = pipeline_toml(tmp_path, other)
    status = runs(other)  # the new configuration's own folder
    before = {p: p.stat().st_mtime_ns for p in status.glob("*.json")}
    child = run_featx("probe", str(toml), wait=False)
    while child.poll() is None:  # killed once it has written a record of the new configuration
        if any(p not in before or p.stat().st_mtime_ns != before[p] for p in status.glob("*__*.json")):
            child.kill()
            break
        time.sleep(0.01)
    child.wait()
    if child.returncode == 0:
        pytest.skip("the probe finished before it could be killed")
    refused("interrupted", load_predictor, load_pipeline(toml))
    result = run_featx("predict", str(toml), str(project.data.path))
    assert result.returncode == 2 and "interrupted" in result.stderr and "Traceback" not in result.stderr
