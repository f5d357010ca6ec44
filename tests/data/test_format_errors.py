"""Data files featx cannot read as given: UTF-16, a semicolon- or tab-separated CSV, empty
trailing header cells, a catastrophically backtracking label_regex, a folder or a device given as
a file. Each error names the problem and the setting that fixes it; what can be read (a
multilabel row with no labels, UTF-16 with its byte-order mark) is read right."""
from __future__ import annotations

from pathlib import Path

import pytest

from featx.config.load import load_pipeline
from tests.conftest import write_rows
from tests.generated import refused


def load(path: Path, **data):
    from featx.config.pipeline import DataConfig
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


@pytest.mark.parametrize("special", ["/dev/null", "/dev/zero"])
def test_a_data_path_that_is_a_device(special):
    refused("not a regular file", load, Path(special))


@pytest.mark.parametrize("packer", ["gzip", "bz2", "lzma", "zip"])
def test_a_compressed_data_file_is_named_compressed(tmp_path, packer):
    import bz2
    import gzip
    import io
    import lzma
    import zipfile

    raw = csv_text().encode()
    if packer == "zip":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as z:
            z.writestr("rows.csv", raw)
        packed = buffer.getvalue()
    else:
        packed = {"gzip": gzip, "bz2": bz2, "lzma": lzma}[packer].compress(raw)
    path = tmp_path / "rows.csv.gz"
    path.write_bytes(packed)
    refused("-compressed; featx reads plain", load, path)
    refused("-compressed; featx reads plain", load, path, format="jsonl")


def test_a_label_names_file_that_is_a_fifo_or_a_folder_is_named_so(tmp_path):
    import os

    path = tmp_path / "rows.csv"
    path.write_text("text,label\n" + "".join(f"text {i},{i % 2}\n" for i in range(20)))
    os.mkfifo(tmp_path / "names.fifo")
    refused("FIFO", load, path, label_names=str(tmp_path / "names.fifo"))
    refused("folder", load, path, label_names=str(tmp_path))


def test_a_column_name_that_differs_only_in_unicode_form_is_said_so(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("t\u00ebxt,label\n" + "".join(f"text {i},{i % 2}\n" for i in range(20)), encoding="utf-8")
    refused("differs from it only in Unicode normalisation", load, path, text="te\u0308xt\u200b")
