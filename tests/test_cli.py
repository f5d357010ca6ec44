"""The command line: user errors are one message and exit status 2, never a traceback."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import (
    ROOT,
    classification_rows,
    run_featx,
    write_pipeline_toml,
    write_rows,
)
from tests.finished_project import pipeline_toml
from tests.generated import FIGURES, examples, write


def assert_user_error(result, *fragments: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("featx: error: ")
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_missing_pipeline_file(tmp_path):
    assert_user_error(run_featx("extract", str(tmp_path / "nope.toml")), "nope.toml", "not found")


def test_bad_override():
    assert_user_error(run_featx("extract", "pipelines/trec.toml", "extract.poolings=[\"cls_token\"]",
                                cwd=ROOT), "unknown pooling 'cls_token'", "'mean'")


def test_bad_data_names_file_row_and_column(tmp_path, tiny_bert):
    rows = classification_rows(20)
    rows[6]["label"] = ""
    data_file = write_rows(tmp_path / "r.csv", rows)
    pipeline = write_pipeline_toml(tmp_path / "p.toml", data_file, tiny_bert, tmp_path / "data")
    assert_user_error(run_featx("extract", str(pipeline)), "r.csv, row 8", "'label'", "missing")


def test_info_before_extract_says_what_to_run(tmp_path, tiny_bert):
    data_file = write_rows(tmp_path / "r.csv", classification_rows(20))
    pipeline = write_pipeline_toml(tmp_path / "p.toml", data_file, tiny_bert, tmp_path / "data")
    before = run_featx("info", str(pipeline))
    assert_user_error(before, "featx extract", "make extract PIPELINE=")
    assert f"model {tiny_bert}: {Path(tiny_bert).resolve()} (found as local" in before.stdout  # where the model is


@pytest.mark.slow  # a subprocess run
def test_extract_then_info(tmp_path, tiny_bert):
    data_file = write_rows(tmp_path / "r.csv", classification_rows(20))
    pipeline = write_pipeline_toml(tmp_path / "p.toml", data_file, tiny_bert, tmp_path / "data")
    first = run_featx("extract", str(pipeline))
    assert first.returncode == 0, first.stderr
    path = Path(first.stdout.strip())
    assert path.is_file() and path.parent == tmp_path / "data" / "cache"
    again = run_featx("extract", str(pipeline))
    assert "cache hit" in again.stderr and again.stdout.strip() == str(path)
    info = run_featx("info", str(pipeline))
    assert info.returncode == 0 and "multiclass" in info.stdout
    assert "runs: none yet" in info.stdout
    probe = run_featx("probe", str(pipeline), 'probe.heads=["logistic"]', "probe.n_jobs=1")
    assert probe.returncode == 0, probe.stderr
    assert "mean@2" in probe.stdout and "*" in probe.stdout and "primary metric: accuracy" in probe.stdout
    # info lists what has run: each configuration's records, and whether it is the current one's.
    listed = run_featx("info", str(pipeline), 'probe.heads=["logistic"]', "probe.n_jobs=1").stdout
    assert " probe " in listed and "of this configuration" in listed, listed
    other = run_featx("info", str(pipeline), 'probe.heads=["ridge"]').stdout
    assert ", 0 of this configuration" in other, other


def test_version_keys_and_help_read_right():
    import importlib.metadata

    import featx

    assert importlib.metadata.version("featx") == featx.__version__  # one source of truth
    from featx.cli import build_parser, main

    usage = build_parser().format_help()
    # Every command's line is its whole first sentence, never cut mid-sentence.
    assert "best features, and the baselines." in " ".join(usage.split())
    assert main(["keys", "finetune"]) == 0
    assert main(["keys", "nope"]) == 2


@examples(300, 40)
@given(text=st.text(max_size=300))
def test_pipeline_files_through_the_cli(tmp_path, text):
    from featx.cli import main

    path = write(tmp_path, "fuzz.toml", text.encode())
    FIGURES["bad_inputs"]["pipeline files (CLI)"] += 1
    try:
        tomllib.loads(text)
        valid_toml = True
    except tomllib.TOMLDecodeError:
        valid_toml = False
    try:
        code = main(["-q", "info", str(path)])
    except SystemExit as exc:  # argparse
        code = exc.code
    except Exception as exc:  # noqa: BLE001
        FIGURES["unhandled"].append(f"pipeline files (CLI): {type(exc).__name__}: {exc}"[:300])
        raise
    assert code == 2 or (valid_toml and code == 0)


def test_overrides_after_a_flag(project, tmp_path, capsys):
    from featx.cli import main

    toml = pipeline_toml(tmp_path, project)
    texts = write_rows(tmp_path / "in.csv", [{"id": "a", "text": "the cat sat"}])
    assert main(["predict", str(toml), str(texts), "--finetuned", "--out", str(tmp_path / "o.csv"),
                 "progress=false"]) == 0
    assert main(["predict", str(toml), str(texts), "--head", "mean@2/logistic", "finetune.seed=0",
                 "--out", str(tmp_path / "o.jsonl")]) == 0


def test_global_flags_follow_the_command_too():
    from featx.cli import COMMANDS, USE, build_parser

    parser = build_parser()
    for command in ["keys", *COMMANDS, *USE]:
        args = ["keys"] if command == "keys" else [command, "p.toml"] + (["in.csv"] if command == "predict" else
                                                                          ["out"] if command == "export" else [])
        for flags, quiet, verbose in (([], False, False), (["-q"], True, False), (["-v", "--quiet"], True, True)):
            for where in (flags + args, args + flags, args[:1] + flags + args[1:]):
                parsed = parser.parse_args(where)
                assert (parsed.quiet, parsed.verbose) == (quiet, verbose), where
        before = parser.parse_args(["-q", *args, "-v"])  # one before, one after: both kept
        assert before.quiet and before.verbose, command


def test_report_takes_q_after_the_pipeline(project, tmp_path, capsys):
    from featx.cli import main

    toml = pipeline_toml(tmp_path, project)
    assert main(["report", str(toml), "-q"]) == 0
    assert main(["verify", str(toml), "-v", "-q"]) == 0
    assert "datasets" in capsys.readouterr().out


def test_predictions_on_stdout_are_the_table_alone(project, tmp_path, capsys):
    import csv
    import io

    from featx.cli import main

    toml = pipeline_toml(tmp_path, project)
    labelled = write_rows(tmp_path / "in.csv", [{"id": "a", "text": "the cat sat", "label": "animal"},
                                                {"id": "b", "text": "the pond", "label": "place"}])
    assert main(["predict", str(toml), str(labelled), "--head", "mean@2/logistic", "--out", "-"]) == 0
    captured = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(captured.out)))
    assert [r["id"] for r in rows] == ["a", "b"] and "accuracy" in captured.err  # the scores on stderr
    assert main(["predict", str(toml), str(labelled), "--out", "-", "--format", "jsonl", "-q"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    for out in ("/dev/stdout", str(tmp_path)):
        assert main(["predict", str(toml), str(labelled), "--out", out]) == 2
    err = capsys.readouterr().err
    assert "use --out -" in err and "is a folder" in err and "Traceback" not in err


def test_an_export_folder_where_a_pipeline_goes_is_named(project, tmp_path, capsys):
    from featx.cli import main
    from featx.serve.export import export

    folder = export(project, tmp_path / "exported", head="mean@2/logistic")
    for command in (["predict", str(folder), "-"], ["extract", str(folder)], ["export", str(folder), "again"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "written by featx export, not a pipeline file" in err and "featx.load_predictor(" in err, err


def test_verbose_adds_featx_s_debug_lines_not_the_libraries(project, tmp_path):
    # A report draws its plots with matplotlib, whose font search logs ~30 lines at DEBUG.
    result = run_featx("-v", "report", str(pipeline_toml(tmp_path, project)))
    assert result.returncode == 0, result.stderr
    assert not [line for line in result.stderr.splitlines() if "matplotlib" in line or "findfont" in line]
