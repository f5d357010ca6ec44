"""What the probe table, the report, its plots and the index show a reader: the selection score
and the rule that starred the frozen choice, heads named by what they fit on the task, the
settings that tell configurations apart, the layer curve of the vectors the verdict chose."""
from __future__ import annotations

import dataclasses
import json

from featx.probe.stage import format_table
from featx.report.collected import Collected
from featx.report.index import index_texts
from featx.report.plots import _plot_layers
from featx.report.verdict import Verdict, verdict
from featx.runs.choice import frozen_choice
from tests.report.test_report import fake


def test_the_probe_table_shows_the_selection_score_and_the_rule_behind_the_star():
    # lightgbm leads on dev by less than the standard error: the simpler logistic head is
    # starred, below rows with higher test scores.
    records = [fake("probe", "multiclass", "mean@4", "logistic", 0.70, selection=0.611, selection_se=0.02),
               fake("probe", "multiclass", "mean@4", "lightgbm", 0.74, selection=0.623, selection_se=0.02),
               fake("probe", "multiclass", "mean@5", "mlp", 0.80, selection=0.55, selection_se=0.02),
               fake("finetune", "multiclass", "finetune:pooler", "linear", 0.82, search=[])]
    table = format_table(records)
    header, _, *rows = table.splitlines()
    assert "select (dev)" in header
    starred = next(row for row in rows if row.startswith("*"))
    assert "mean@4" in starred and "logistic" in starred and "0.6110" in starred
    assert any("lightgbm" in row and "0.6230" in row for row in rows)
    finetune = next(row for row in rows if "finetune:pooler" in row).split()
    # the fine-tune's selection score is its best epoch's (fake: the curve's 0.82)
    assert finetune[finetune.index("finetune") + 1] == "0.8200"
    assert "select: accuracy on dev, what a row is chosen by" in table
    assert ("* the frozen choice, mean@4 logistic: the simplest head whose score on dev is within one "
            "standard error of the best (mean@4 lightgbm, 0.6230)") in table
    no_selection = dataclasses.replace(records[-1], search=[], curve={"loss": [], "select": []})
    assert format_table([no_selection]).splitlines()[2].split()[3] == "-"


def test_a_regression_report_names_the_logistic_head_by_what_it_fits():
    records = [fake("probe", "regression", f"bi:sentence@{layer}", "logistic", 0.80 + 0.01 * layer,
                    pooling="sentence", combine="bi") for layer in (5, 6)]
    records += [fake("probe", "regression", "mean@6", "logistic-torch", 0.70),
                fake("finetune", "regression", "finetune:pooler", "linear", 0.85)]
    collected = Collected("fx", records, [], choice=frozen_choice(records))
    assert collected.choice.record.head == "logistic"  # the record keeps the registry's name
    text = verdict(collected).text
    assert ", ridge; chosen on dev" in text and "logistic" not in text
    table = format_table(records)
    assert "logistic" not in table and "ridge-torch" in table
    assert "* the frozen choice, bi:sentence@6 ridge: the best score on dev, with no simpler head within one " \
           "standard error of it" in table
    classification = fake("probe", "binary", "mean@6", "logistic", 0.7)
    assert classification.shown_head == "logistic" and "logistic" in format_table([classification])


def test_the_index_tells_apart_configurations_that_differ_by_their_seeds(tmp_path):
    base = tmp_path / "fx"
    probe = {"protocol": "auto", "grid": "staged", "seeds": [0], "heads": ["ridge", "logistic"]}
    older = {"id": "aaaa-bbbb-none", "pipeline": "fx", "written": "2024-01-01T00:00:00Z", "command": "featx report",
             "backbone": {"name": "m", "fingerprint": "f" * 64, "init": "pretrained"}, "probe": probe,
             "finetune": None, "headline": "Older."}
    (base / older["id"]).mkdir(parents=True)
    (base / older["id"] / "verdict.json").write_text(json.dumps({"configuration": older}))
    newer = older | {"id": "aaaa-cccc-none", "written": "2024-01-02T00:00:00Z", "probe": probe | {"seeds": [1, 2]}}
    index, _ = index_texts(base, newer, Verdict("Newer.", None, None, None, None))
    rows = {line.split("|")[1].strip(): line for line in index.splitlines() if line.startswith("| [")}
    assert "auto, staged, seeds [1, 2] |" in rows["[aaaa-cccc-none](aaaa-cccc-none/report.md)"]
    assert "auto, staged, seeds [0] |" in rows["[aaaa-bbbb-none](aaaa-bbbb-none/report.md)"]
    assert "heads" not in index  # alike in both: nothing to tell apart
    alone, _ = index_texts(tmp_path / "alone", older, Verdict("Older.", None, None, None, None))
    assert "| auto, staged |" in alone  # the default seeds, alone: nothing added
    # A fine-tuned configuration beside frozen-only ones: its settings differ from none of theirs.
    tuned = newer | {"id": "aaaa-cccc-dddd", "finetune": {"head_input": "pooler", "learning_rates": [1e-4]},
                     "finetune_settings": {"max_epochs": 3, "batch_size": 32}}
    index, _ = index_texts(base, tuned, Verdict("Tuned.", None, None, None, None))
    assert "pooler, lr 0.0001 |" in index and "max_epochs" not in index


def _pair_records(bi_layers: tuple[int, ...]) -> list:
    """A text-pair regression's probes: the joint `mean` sweep, and bi: `mean` vectors at
    `bi_layers`, one of which the verdict chooses."""
    records = [fake("probe", "regression", f"mean@{layer}", "logistic", 0.60 + 0.01 * layer) for layer in range(4)]
    records += [fake("probe", "regression", f"bi:mean@{layer}", "logistic", 0.80 + 0.01 * layer,
                     pooling="mean", combine="bi") for layer in bi_layers]
    return records


def _drawn(records) -> tuple[str, list[str]]:
    figure = _plot_layers(Collected("fx", records, [], choice=frozen_choice(records)))
    axis = figure.axes[0]
    return axis.get_title(), axis.get_legend_handles_labels()[1]


def test_the_layer_plot_of_a_pair_task_shows_the_vectors_the_verdict_chose():
    title, labels = _drawn(_pair_records((1, 2, 3)))
    assert "bi:mean, the frozen choice's vectors" in title
    assert labels == ["bi:mean + ridge"]
    # Chosen bi: vectors of one layer have no curve: the joint one stays, named so, and the
    # choice is its own point.
    title, labels = _drawn(_pair_records((3,)))
    assert "(the frozen choice: bi:mean)" in title
    assert labels == ["joint:mean + ridge", "bi:mean@3 + ridge (the frozen choice)"]
    # A single-text task: as before, every curve, named by its pooling.
    title, labels = _drawn(_pair_records(()))
    assert title == "Probe quality by layer" and labels == ["mean + ridge"]
