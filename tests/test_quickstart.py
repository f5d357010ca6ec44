"""The README's quickstart for your own data works as copied: its pipeline file (train, dev and
test files, integer labels and their names), `featx all`, `featx predict` on new texts and the
exported fine-tune, whose id2label carries the names, with the real packaged model."""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def quickstart() -> tuple[str, list[str]]:
    """The TOML block and the shell commands of the README's "Your own data" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Your own data", 1)[1].split("\n## ", 1)[0]
    toml = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    bash = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#", 1)[0].strip() for line in bash.splitlines() if line.strip()]
    return toml, commands


def test_readme_quickstart_runs_as_written(tmp_path):
    from featx.config.pipeline import DataConfig
    from featx.data import load_dataset

    import tomllib

    toml, commands = quickstart()
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "mine.toml").write_text(toml)
    data = tomllib.loads(toml)["data"]  # the files and columns the README names
    text, label = data.get("text", "text"), data.get("label", "label")
    trec = load_dataset(DataConfig(builtin="trec"))
    texts, labels = trec.splits["train"].texts, trec.splits["train"].labels
    (tmp_path / data["label_names"]).parent.mkdir(parents=True)
    (tmp_path / data["label_names"]).write_text("\n".join(trec.label_names) + "\n")
    for split, rows in (("train", range(300)), ("dev", range(300, 360)), ("test", range(360, 420))):
        with open(tmp_path / data[split], "w", newline="") as f:  # integer labels, named by label_names
            writer = csv.DictWriter(f, fieldnames=[text, label])
            writer.writeheader()
            writer.writerows({text: texts[i], label: int(labels[i])} for i in rows)
    (tmp_path / "new.csv").write_text(f"id,{text}\n1,What is the capital of France ?\n2,Who wrote Hamlet ?\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT))
    bin_dir = Path(sys.executable).parent
    for command in commands:
        # `make all PIPELINE=x` is `featx all x` with the venv set up; the venv is this one.
        command = re.sub(r"^make all PIPELINE=(\S+)", r"featx -q all \1", command)
        command = command.replace(".venv/bin/featx", "featx")
        assert command.startswith("featx"), command
        args = command.split()[1:]
        result = subprocess.run([str(bin_dir / "featx"), *args], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"
    reports = tmp_path / "data" / "reports" / "mine"
    latest = json.loads((reports / "latest.json").read_text())
    assert (reports / latest["report"]).is_file() and latest["id"] in (reports / "index.md").read_text()
    with open(tmp_path / "data" / "predictions" / "mine.csv") as f:
        predicted = list(csv.DictReader(f))
    assert [r["id"] for r in predicted] == ["1", "2"]
    assert {r["prediction"] for r in predicted} <= set(trec.label_names)
    exported = json.loads((tmp_path / "exported" / "config.json").read_text())
    assert exported["id2label"] == {str(i): name for i, name in enumerate(trec.label_names)}
