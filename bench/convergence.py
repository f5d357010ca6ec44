"""Does the default fine-tune stop where more training no longer pays?

For each pipeline, featx's default fine-tune (the learning-rate search, the chosen rate trained
until the plateau rule stops it) and a run of the same recipe with twice its epochs (the cap
at 2x the default's epochs, patience past it, so it trains to the cap and anneals in its last
tenth), on the same cache and test rows. Printed per pipeline: epochs, optimizer steps, wall
time and test score of each, and the paired bootstrap interval of 2x minus the default: the
default is converged in the sense that matters when the interval holds 0.

`python -m bench convergence [PIPELINE ...]` (default: trec, trec-fine and, where
../shared/data has it, cola). About an hour on 2 CPU cores; both runs are kept in data/, so a
second call reuses them.
"""
from __future__ import annotations

import sys

from bench.common import ROOT, SHARED, machine, save, table

DEFAULT = ("pipelines/trec.toml", "pipelines/trec-fine.toml", "pipelines/cola.toml")
NEVER = 1000  # a patience past any cap: the run trains to it


def compare(path: str) -> dict:
    """The default fine-tune of the pipeline at `path` and the one with twice its epochs."""
    from featx.stats import bootstrap
    from featx.config.load import load_pipeline
    from featx.cache.extract import extract
    from featx.finetune.stage import run_finetune
    from featx.runs.records import read_predictions, record_dir

    pipeline = load_pipeline(ROOT / path, ["progress=false"])
    extract(pipeline)
    default = run_finetune(pipeline)
    doubled_args = [f"finetune.max_epochs={2 * default.epochs}", f"finetune.patience={NEVER}"]
    doubled = run_finetune(load_pipeline(ROOT / path, ["progress=false", *doubled_args]))
    metric = default.primary_metric
    a = read_predictions(record_dir(pipeline.runs_dir, doubled), doubled)
    b = read_predictions(record_dir(pipeline.runs_dir, default), default)
    paired = bootstrap.paired(default.task, metric, b.labels, (a.scores, a.threshold), (b.scores, b.threshold))
    low, high = paired["difference_ci"]
    return {"pipeline": pipeline.name, "metric": metric, "doubled_with": doubled_args,
            "default": _run(default), "doubled": _run(doubled),
            "difference": paired["difference"], "interval": [low, high], "within": low <= 0 <= high}


def _run(record) -> dict:
    return {"learning_rate": record.learning_rate, "epochs": record.epochs, "best_epoch": record.best_epoch,
            "steps": record.steps, "converged": record.converged, "stopped_by": record.stopped_by,
            "plateau_epoch": (record.curve or {}).get("plateau_epoch"),
            "wall_seconds": record.wall_seconds, "test": record.metrics[record.primary_metric]}


def run(argv: list[str] | None = None) -> None:
    paths = argv or [p for p in DEFAULT if p != "pipelines/cola.toml" or (SHARED / "cola").is_dir()]
    results = [compare(p) for p in paths]
    rows = [[r["pipeline"], r["metric"], f"{r['default']['epochs']} ({r['default']['best_epoch']})",
             r["default"]["steps"], f"{r['default']['wall_seconds']:.0f}", r["default"]["test"],
             f"{r['doubled']['epochs']} ({r['doubled']['best_epoch']})", f"{r['doubled']['wall_seconds']:.0f}",
             r["doubled"]["test"], f"{r['difference']:+.4f} [{r['interval'][0]:+.4f}, {r['interval'][1]:+.4f}]",
             "yes" if r["within"] else "NO"] for r in results]
    print(table(rows, ["pipeline", "metric", "epochs (best)", "steps", "wall s", "test", "2x epochs (best)",
                       "2x wall s", "2x test", "2x - default [95%]", "within"]))
    info = machine()
    print(f"({info['cpu']}, {info['cores']} cores, load {info['load']}, torch {info['torch']})")
    print(f"saved {save('convergence', {'machine': info, 'results': results})}")


if __name__ == "__main__":
    run(sys.argv[1:])
