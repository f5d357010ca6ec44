"""The report's "Results" notes: what the configuration lacks (a stage, the random-init control)
with the command that makes it, the task and its primary metric, the labels (binary: the
positive class; multilabel: what the macro metrics average over) and the texts cut at max_length.
"""
from __future__ import annotations

from featx.config.load import command, make_command
from featx.runs.schema import Record
from featx.report.collected import Collected


def result_notes(collected: Collected) -> list[str]:
    """The notes `collect` made, then what this configuration lacks, the task, its labels and
    the texts the fine-tune truncated."""
    notes = list(collected.notes)
    stages = {r.stage for r in collected.main}
    current = collected.current
    if "probe" not in stages:
        notes.append(f"No probe records of this configuration: run `{command(current, 'probe')}` "
                     f"(`{make_command(current, 'probe')}`).")
    if "finetune" not in stages:
        notes.append(f"No fine-tune record of this configuration: run `{command(current, 'finetune')}` "
                     f"(`{make_command(current, 'finetune')}`) for the baseline.")
    if not collected.control:
        notes.append(f"No random-init control: `{command(current, 'extract', 'model.init=random')}`, then "
                     "`featx probe` and `featx finetune` with the same overrides.")
    if collected.main:
        first = collected.main[0]
        notes.append(f"Task: {first.task}; primary metric {first.primary_metric} (higher is better).")
    return notes + _label_notes(collected.main, collected.choice) + _truncation_notes(collected.main)


def _label_notes(records: list[Record], choice) -> list[str]:
    """Binary: the positive class. Multilabel: the labels the macro metrics average over, the
    labels no head could learn, the labels each selection fold of the best frozen probe could score."""
    # A probe's summary first: its training rows are all of train (a fine-tune without a dev
    # split trains on 90% of them).
    binary = next((r.labels for r in records if r.labels and "positive" in r.labels), None)
    if binary is not None:
        shares = [f"{binary[k]:.0%} of {name}"
                  for k, name in (("positive_train", "train"), ("positive_report", "the reported rows"))
                  if isinstance(binary.get(k), (int, float))]
        return [f"Positive class: {binary['positive']!r} (against {binary['negative']!r}; {', '.join(shares)}): "
                "f1 is its F1, and data.label_names orders the two labels (the second is positive)."]
    described = sorted((r for r in records if r.labels and "total" in r.labels), key=lambda r: r.stage != "probe")
    if not described:
        return []
    summary, split = described[0].labels, described[0].protocol["report_on"]
    notes = [f"Labels: macro_f1 averages over the {summary['macro_f1']} of {summary['total']} labels with "
             f"a positive {split} row, macro_roc_auc over the {summary['macro_roc_auc']} with a positive "
             "and a negative one; micro_f1 counts every label."]
    constant = summary["constant_in_train"]
    if constant:
        notes.append(f"{len(constant)} label(s) never (or always) present in the training split are "
                     f"predicted as that constant by every head: {', '.join(constant[:10])}"
                     f"{', ...' if len(constant) > 10 else ''}.")
    frozen = choice.record if choice else None
    folds = frozen.selection_labels if frozen else None
    if folds and any(f["labels_scored"] < summary["total"] for f in folds):
        notes.append(f"The best frozen probe was selected on {frozen.protocol['select_on']}: "
                     "labels with a positive held-out row per selection split: "
                     f"{', '.join(str(f['labels_scored']) for f in folds)} of {summary['total']}.")
    return notes


def _truncation_notes(records: list[Record]) -> list[str]:
    """Texts longer than max_length lose their end: how many the fine-tune cut (its record
    counts them; extraction cut the same texts for the probes)."""
    notes = []
    for tune in (r for r in records if r.stage == "finetune" and r.truncated):
        cut = tune.truncated
        if cut["train"] or cut["report"]:
            notes.append(f"The fine-tune ({tune.shown_head}) truncated {cut['train']:,} of "
                         f"{tune.n_train:,} training texts at max_length = {cut['max_length']} "
                         f"tokens, and {cut['report']:,} of {tune.n_eval:,} "
                         f"{tune.protocol['report_on']} texts.")
    return notes
