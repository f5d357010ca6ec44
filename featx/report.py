"""The frozen-vs-tuned report: records -> tables, a verdict, plots. Formatting only.

Reads the run records and the predictions stored beside them (no torch, no backbone, no cache),
and writes `data/reports/<pipeline>/report.md`, a self-contained `report.html` (images
embedded), the plots as PNG files, `results.csv` and `verdict.json`. docs/verdict.md states the
verdict rule.
"""
from __future__ import annotations

import base64
import csv
import dataclasses
import html
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx.bootstrap import MIN_ROWS
from featx.config import Pipeline, command
from featx.errors import FeatxError
from featx.records import FrozenChoice, best_tuned, frozen_choice, made_by, read_records, selection_score

# How the verdict reads the quality ratio (best frozen / fine-tuned primary metric).
GOOD_ENOUGH, CLOSE = 0.98, 0.90


@dataclass
class Inputs:
    pipeline: str
    main: list[dict]
    """Records of the pipeline's pretrained cache: probes and fine-tunes."""
    control: list[dict]
    """Records of the random-init control (its own cache), if any."""
    ignored_caches: int
    notes: list[str] = dataclasses.field(default_factory=list)
    """What was left out (earlier configurations) or is incomplete (an interrupted probe)."""
    choice: "FrozenChoice | None" = None
    """The verdict's frozen configuration (`records.frozen_choice` on `main`), chosen once so the
    verdict, the plots and the notes name the same one."""


def collect(runs_dir: str | Path, pipeline: str, current: "Pipeline | None" = None) -> Inputs:
    """The pipeline's records, grouped by cache: the newest pretrained cache is the main one.

    With `current` (the pipeline as configured now), only records its configuration made are
    kept: a probe record of another probe configuration, or a fine-tune of other settings, is
    left out and counted, never compared with the new ones."""
    groups: dict[tuple[str, str], list[dict]] = {}
    folders: dict[str, Path] = {}
    for directory in sorted((Path(runs_dir) / pipeline).glob("*")):
        for record in read_records(directory):
            if record["pipeline"] == pipeline:
                groups.setdefault((record["init"], record["cache_key"]), []).append(record)
                folders[record["cache_key"]] = directory
    if not groups:
        raise FeatxError(f"no run records for pipeline {pipeline!r} under {runs_dir}: run "
                         "`make probe` (and `make finetune`) first")
    notes: list[str] = []
    if current is not None:
        stale = 0
        for key, records in groups.items():
            kept = [r for r in records if made_by(r, current)]
            stale += len(records) - len(kept)
            groups[key] = kept
        if stale:
            notes.append(f"{stale} record(s) of an earlier probe or fine-tune configuration were left "
                         "out (rerun the stage to replace them).")
    groups = {k: g for k, g in groups.items() if g}
    if not groups:
        raise FeatxError(f"no run records of the current configuration for pipeline {pipeline!r}: "
                         "rerun `make probe` (and `make finetune`)")
    newest = lambda init: max((g for (i, _), g in groups.items() if i == init),  # noqa: E731
                              key=lambda g: max(r["created"] for r in g), default=[])
    main, control = newest("pretrained"), newest("random")
    ignored = len(groups) - bool(main) - bool(control)
    for records in (main, control):
        if records and current is not None:
            notes += _interrupted(folders[records[0]["cache_key"]], current, len(
                [r for r in records if r["stage"] == "probe"]))
    if current is not None:
        notes = _stale(current, main) + notes
    return Inputs(pipeline, main, control, ignored, notes, frozen_choice(main, runs_dir))


def _stale(current: "Pipeline", main: list[dict]) -> list[str]:
    """A note, first, when the records are not of the cache the pipeline's data and model give
    now (a data file edited since, even with its size and time kept): probe and predict refuse
    such records; the report shows them, and says so."""
    from featx.plan import find_cache

    if not main or main[0]["init"] != current.model.init:
        return []
    try:
        path = find_cache(current)
    except FeatxError as exc:
        return [f"The pipeline as it is now has no cache ({str(exc)[:160]}): if a data or model file "
                "changed since these records were made, they describe other data; rerun `featx "
                "extract`, `featx probe` and `featx finetune` before trusting this report."]
    if path.stem == main[0]["cache_key"][:16]:
        return []
    return ["These records are not of the data and model the pipeline names now: a data or model "
            "file changed since they were made. Rerun `featx probe` and `featx finetune` on the new "
            "cache before trusting this report."]


def _interrupted(directory: Path, pipeline: "Pipeline", found: int) -> list[str]:
    from featx.files import loads_json
    from featx.records import probe_config_hash

    path = directory / "probe" / "run.json"
    try:
        run = loads_json(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(run, dict):
        return []
    if run.get("config_hash") == probe_config_hash(pipeline.probe) and not run.get("finished"):
        return [f"The probe run was interrupted: {found} of its {run.get('planned')} fits have "
                "records; rerun `make probe` to finish it (finished fits are redone, not lost)."]
    return []


# ---------------------------------------------------------------------------------------------
# Rows, verdict


def rows(inputs: Inputs) -> list[dict]:
    """One row per record: fine-tunes, probes (best selection score first), baselines, then
    the control's."""
    def order(r):
        group = (0 if r["stage"] == "finetune" else 2 if r["baseline"] else 1)
        return (r["init"] != "pretrained", group, -selection_score(r), r["features"], r["head"])
    out = []
    for record in sorted(inputs.main + inputs.control, key=order):
        primary = record["primary_metric"]
        ci = (record["metrics_ci"] or {}).get(primary) or [None, None]
        selection = selection_score(record)
        out.append({
            # A baseline reads the texts: no backbone, so no init and no cache of its own.
            "stage": record["stage"], "init": "" if record["baseline"] else record["init"],
            "features": record["features"],
            "head": record["head"], "baseline": record["baseline"] or "",
            "protocol": record["protocol"]["name"], "primary_metric": primary,
            "primary": record["metrics"][primary], "primary_std": record["metrics_std"].get(primary, 0.0),
            "primary_ci_low": ci[0], "primary_ci_high": ci[1],
            "selection": selection if math.isfinite(selection) else None,
            **{f"metric:{k}": v for k, v in record["metrics"].items()},
            "train_seconds": _seconds(record), "backbone_forward_passes": record["backbone_forward_passes"],
            "cache_mb": round(record["cache_bytes"] / 1e6, 1) if record["cache_bytes"] and not record["baseline"] else None,
            "seeds": len(record["seeds"] or [1]), "n_eval": record["n_eval"],
            "converged": record["converged"],
        })
    return out


def _seconds(record: dict) -> float | None:
    if record["stage"] == "finetune":
        return record["wall_seconds"]
    return record["fit_seconds"]


@dataclass
class Verdict:
    text: str
    frozen: dict | None
    tuned: dict | None
    quality_ratio: float | None
    compute_ratio: float | None
    comparison: dict | None = None
    """The paired bootstrap of frozen against tuned (featx.bootstrap.paired), if it could run."""
    lexical: dict | None = None
    """The paired bootstrap of the best frozen probe against the TF-IDF baseline."""


def verdict(inputs: Inputs, runs_dir: str | Path | None = None, pipeline: "Pipeline | None" = None) -> Verdict:
    """The frozen choice against the best fine-tune (pretrained backbone), in one paragraph.

    Both sides are chosen by their selection score (dev or cross-validation), never by the test
    score they report. With their predictions (`runs_dir`), the two are compared by a paired
    bootstrap over the same test rows: the difference, its 95% interval and the ratio. An
    unconverged fine-tune is a lower bound: the paragraph leads with that and with the command
    that continues it. With `pipeline`, each verdict ends with the command that acts on it."""
    choice = inputs.choice
    run = lambda stage, *extra, args=(): f"`{command(pipeline, stage, *extra, args=args)}`"  # noqa: E731
    if choice is None:
        return Verdict(f"No probe records yet: run {run('probe')} to train heads on the cache.",
                       None, None, None, None)
    frozen = choice.record
    primary = frozen["primary_metric"]
    described = _frozen_text(choice)
    f = _value(frozen, primary)
    lexical, lexical_text = _lexical(inputs, frozen, primary, runs_dir)
    tuned = best_tuned(inputs.main, primary)
    if tuned is None:
        return Verdict(f"{described} reach {primary} = {_with_ci(frozen, primary)} on "
                       f"{frozen['n_eval']:,} {frozen['protocol']['report_on']} rows. No fine-tune record "
                       f"yet: run {run('finetune')} for the baseline this is to be compared with."
                       f"{lexical_text}", frozen, None, None, None, None, lexical)
    t = _value(tuned, primary)
    if not (math.isfinite(f) and math.isfinite(t)):
        undefined = " and ".join(n for n, v in (("the frozen probe", f), ("the fine-tune", t)) if not math.isfinite(v))
        return Verdict(f"No verdict: {primary} is undefined for {undefined} (a constant prediction or "
                       "a single-class test split); see the table.", frozen, tuned, None, None)
    frozen_cost, tuned_cost = frozen["backbone_forward_passes"] or 0, tuned["backbone_forward_passes"] or 0
    compute = frozen_cost / tuned_cost if frozen_cost and tuned_cost else None
    comparison = _paired(inputs, frozen, tuned, primary, runs_dir)
    ratio = f / t if t > 0 and f >= 0 else None
    if comparison is not None and not all(math.isfinite(v) for v in comparison["difference_ci"]):
        return Verdict(_no_interval(described, f, t, primary, comparison) + lexical_text, frozen, tuned,
                       ratio, compute, comparison, lexical)
    if tuned["converged"] is False:
        text = _unfinished(described, frozen, tuned, primary, comparison, run)
        return Verdict(text + lexical_text, frozen, tuned, ratio, compute, comparison, lexical)
    cost_text = (f" for {_fraction(compute)} of the compute ({frozen_cost:,} vs {tuned_cost:,} backbone "
                 "forward-pass equivalents: one extraction pass against the fine-tune's whole "
                 "learning-rate search, training steps at ~3 forwards each plus evaluation)") if compute else ""
    if ratio is not None:
        head = f"{described} reach {ratio:.1%} of the fine-tuned {primary} ({f:.4f} vs {t:.4f}){cost_text}."
    else:  # a ratio of a negative or zero score means nothing; give the difference
        head = (f"{described}: {primary} {f:.4f} against {t:.4f} fine-tuned (difference "
                f"{f - t:+.4f}){cost_text}.")
    reading, act = _reading(ratio, f, t, comparison)
    text = f"{head}{_comparison_text(comparison, tuned)}{_wall(frozen, tuned)} {reading}{lexical_text}"
    next_step = {"frozen": f" Next: predict with the frozen choice, {run('predict', args=('new.csv',))}.",
                 "tuned": " Next: use the fine-tuned model, "
                          f"{run('export', args=('exported', '--finetuned'))}.",
                 "both": f" Next: iterate with the frozen choice, {run('predict', args=('new.csv',))}; "
                         f"for the last points, {run('export', args=('exported', '--finetuned'))}."}.get(act, "")
    return Verdict(text + next_step, frozen, tuned, ratio, compute, comparison, lexical)


def _frozen_text(choice) -> str:
    """"Frozen features (mean, layer 5, mlp; chosen on dev ...)", with how the choice was made."""
    frozen = choice.record
    layers = f"layer{'s' if len(frozen['layers']) > 1 else ''} {'+'.join(map(str, frozen['layers']))}"
    vectors = {"bi": f"[u, v, |u - v|, u * v] of the two texts' {frozen['pooling']} vectors",
               "cos": f"the cosine of the two texts' {frozen['pooling']} vectors"}.get(frozen["combine"], frozen["pooling"])
    head = "no training" if frozen["head"] == "identity" else frozen["head"]
    rule = ""
    if choice.record is not choice.top and choice.paired:
        rule = (f", the simplest of the {choice.within} configurations that {frozen['protocol']['select_on']} "
                f"cannot tell apart from the best selection score, {selection_score(choice.top):.4f} "
                f"({choice.top['features']} {choice.top['head']}): {selection_score(choice.top) - selection_score(frozen):.4f} "
                f"below it, within one standard error of the paired difference ({choice.se:.4f})")
    elif choice.record is not choice.top:
        rule = (f", the simplest of the {choice.within} configurations within one standard error "
                f"({choice.se:.4f}) of the best selection score, {selection_score(choice.top):.4f} "
                f"({choice.top['features']} {choice.top['head']})")
    return f"Frozen features ({vectors}, {layers}, {head}; chosen on {frozen['protocol']['select_on']}{rule})"


def _unfinished(described: str, frozen: dict, tuned: dict, primary: str, comparison, run) -> str:
    """The verdict against a fine-tune a cap stopped while it was still improving: that comes
    first, with the command that continues it; no ratio headline against it."""
    cap = (f"its epoch cap (finetune.max_epochs = {tuned['epochs']})" if tuned["stopped_by"] == "max_epochs"
           else "its wall-time cap (finetune.max_seconds)" if tuned["stopped_by"] == "budget"
           else f"{tuned['stopped_by']}")
    go_on = (f"`{tuned['continue_with']}`" if tuned["continue_with"]
             else run("finetune", "finetune.max_epochs=" + str(2 * max(tuned["epochs"] or 1, 1))))
    text = (f"The fine-tune did not converge: {cap} stopped it after {tuned['epochs']} epochs while its "
            f"{primary} on {tuned['protocol']['select_on']} was still rising, so its {primary} "
            f"({_with_ci(tuned, primary)}) is only a lower bound; continue it with {go_on} (it resumes "
            f"from its last epoch). So far, {described[0].lower() + described[1:]} score "
            f"{_value(frozen, primary):.4f} against it")
    if comparison is None:
        return text + (f"; no interval: the records' predictions are missing or not on the same rows. "
                       "Whether fine-tuning pays is not settled until it converges.")
    low, high = comparison["difference_ci"]
    text += (f" (paired bootstrap over the same {comparison['n']:,} {comparison['split']} rows: difference "
             f"{comparison['difference']:+.4f}, 95% interval [{low:+.4f}, {high:+.4f}]).")
    if low > 0:
        return text + (" Frozen features lead the unfinished fine-tune, which does not show that "
                       "fine-tuning cannot do better: that is settled only once it converges.")
    if high < 0:
        return text + " Even unfinished, the fine-tune is measurably better: fine-tuning pays on this task."
    return text + " No measurable difference so far; the finished fine-tune may still pull ahead."


def _no_interval(described: str, f: float, t: float, primary: str, comparison: dict) -> str:
    """No verdict when the paired bootstrap gives no interval: a score difference on a handful of
    rows (or on resamples where the metric is mostly undefined) reads as a result and is not."""
    return (f"No verdict: {described[0].lower() + described[1:]} score {primary} = {f:.4f} against "
            f"{t:.4f} fine-tuned, but on {comparison['n']:,} {comparison['split']} rows the paired "
            f"bootstrap gives no interval (it needs at least {MIN_ROWS} rows, and {primary} defined on "
            "90% of the resamples), so this test split cannot tell the two apart. Give it more rows "
            "(a larger test file, or data.test_fraction).")


def _comparison_text(comparison: dict | None, tuned: dict) -> str:
    if comparison is None:
        return (f" No interval: the records' predictions are missing or not on the same rows "
                f"({tuned['n_eval']} test rows); rerun the probe and the fine-tune.")
    low, high = comparison["difference_ci"]
    text = (f" Paired bootstrap over the same {comparison['n']:,} {comparison['split']} rows: difference "
            f"{comparison['difference']:+.4f}, 95% interval [{low:+.4f}, {high:+.4f}]")
    if comparison.get("ratio_ci") and all(math.isfinite(v) for v in comparison["ratio_ci"]):
        text += f"; ratio 95% interval [{comparison['ratio_ci'][0]:.1%}, {comparison['ratio_ci'][1]:.1%}]"
    return text + "."


def _reading(ratio, f, t, comparison) -> tuple[str, str]:
    """(the reading of a converged comparison, which side to act on: frozen, tuned or none)."""
    if comparison is not None:
        low, high = comparison["difference_ci"]
        if low <= 0 <= high:
            wide = high - low > 0.05
            return ("No measurable difference: frozen features are as good as this test set can tell"
                    + (" (the interval is wide: more test rows would tell smaller differences apart)."
                       if wide else "."), "frozen")
        if low > 0:
            return "Frozen features beat the fine-tune here: keep them.", "frozen"
    if ratio is None:
        return ("Frozen features are good enough here.", "frozen") if f >= t else ("Fine-tuning pays on this task.", "tuned")
    if ratio >= GOOD_ENOUGH:
        return "Frozen features are good enough here.", "frozen"
    if ratio >= CLOSE:
        return "Frozen features come close: use them to iterate, fine-tune for the last points.", "both"
    return "Fine-tuning pays on this task.", "tuned"


def _lexical(inputs: Inputs, frozen: dict, primary: str, runs_dir) -> tuple[dict | None, str]:
    """Whether the backbone adds anything over TF-IDF: the frozen choice against the lexical
    baseline, paired on the same rows."""
    lexical = [r for r in inputs.main if r["baseline"] == "lexical" and r["primary_metric"] == primary]
    if not lexical:
        return None, ""
    baseline = max(lexical, key=selection_score)
    comparison = _paired(inputs, frozen, baseline, primary, runs_dir)
    value = _with_ci(baseline, primary)
    if comparison is None:
        return None, f" The TF-IDF baseline reaches {primary} = {value}."
    low, high = comparison["difference_ci"]
    if not (math.isfinite(low) and math.isfinite(high)):
        return comparison, (f" The TF-IDF baseline reaches {primary} = {value}; on "
                            f"{comparison['n']:,} rows there is no paired interval to compare it by.")
    interval = (f"(difference {comparison['difference']:+.4f}, 95% interval [{low:+.4f}, {high:+.4f}])")
    if high < 0:
        return comparison, (f" A linear head on TF-IDF of the texts' words and character n-grams does "
                            f"measurably better ({primary} = {value}) than the frozen choice {interval}: "
                            "on this task the backbone's frozen features lose to word and character "
                            "n-grams.")
    if low <= 0:
        return comparison, (f" A linear head on TF-IDF of the texts' words and character n-grams reaches "
                            f"{primary} = {value}, within the interval of the frozen choice {interval}: "
                            "the backbone adds nothing measurable over word and character n-grams here.")
    return comparison, (f" The backbone adds {comparison['difference']:+.4f} {primary} over TF-IDF on the "
                        f"texts ({value}; 95% interval of the gain [{low:+.4f}, {high:+.4f}]).")


def _paired(inputs: Inputs, a: dict, b: dict, metric: str, runs_dir) -> dict | None:
    """featx.bootstrap.paired on the two records' stored predictions; None when either is
    missing or they are not predictions of the same rows."""
    from featx import bootstrap
    from featx.records import read_predictions, run_dir

    if runs_dir is None or a["task"] != b["task"]:
        return None
    try:
        pa = read_predictions(run_dir(runs_dir, a["pipeline"], a["cache_key"]), a)
        pb = read_predictions(run_dir(runs_dir, b["pipeline"], b["cache_key"]), b)
    except FeatxError:
        return None
    if not (np.array_equal(pa.ids, pb.ids) and np.array_equal(pa.labels, pb.labels)):
        return None
    result = bootstrap.paired(a["task"], metric, pa.labels, (pa.scores, pa.threshold),
                              (pb.scores, pb.threshold))
    return result | {"split": a["protocol"]["report_on"]}


def _with_ci(record: dict, metric: str) -> str:
    value = _value(record, metric)
    ci = (record["metrics_ci"] or {}).get(metric)
    if ci and all(v is not None and math.isfinite(v) for v in ci):
        return f"{value:.4f} [{ci[0]:.4f}, {ci[1]:.4f}]"
    return f"{value:.4f}"


def _value(record: dict, metric: str) -> float:
    value = record["metrics"].get(metric, float("nan"))
    return float("nan") if value is None else value


def _fraction(ratio: float) -> str:
    return f"1/{1 / ratio:.0f}" if ratio < 1 else f"{ratio:.1f}x"


def _wall(frozen: dict, tuned: dict) -> str:
    extract, fit, train = frozen["extract_seconds"], frozen["fit_seconds"], tuned["wall_seconds"]
    if extract is None or fit is None or train is None:
        return ""
    return (f" Wall time: {extract:.0f} s extraction + {fit:.1f} s head fit, against {train:.0f} s "
            "of fine-tuning.")


# ---------------------------------------------------------------------------------------------
# Plots (matplotlib, PNG bytes)


def plots(inputs: Inputs, cache_dir: Path | None = None) -> dict[str, bytes]:
    import os

    if cache_dir is not None and "matplotlib" not in __import__("sys").modules:
        # matplotlib writes its font cache under $HOME unless told otherwise: keep it with featx's data.
        os.environ.setdefault("MPLCONFIGDIR", str(cache_dir))
    import matplotlib
    matplotlib.use("Agg")
    out = {}
    for name, draw in (("layers", _plot_layers), ("heads", _plot_heads), ("learning_curve", _plot_curve),
                       ("cost", _plot_cost)):
        figure = draw(inputs)
        if figure is not None:
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
            import matplotlib.pyplot as plt
            plt.close(figure)
            out[name] = buffer.getvalue()
    return out


def _tuned_levels(records: list[dict], primary: str, axis) -> None:
    for record in records:
        if record["stage"] == "finetune":
            axis.axhline(record["metrics"][primary], linestyle="--", color="black", linewidth=1,
                         label=f"fine-tuned ({record['features']}, {record['head']})")


def _legend_outside(axis, **options) -> None:
    """The legend to the right of the axes, never over the data it explains."""
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, **options)


def _ci_error(records: list[dict], primary: str):
    """(2, n) distances from each value to its 95% interval, for error bars (0 when unknown)."""
    import numpy as np

    low, high = [], []
    for r in records:
        value = r["metrics"][primary]
        ci = (r.get("metrics_ci") or {}).get(primary) or [value, value]
        ci = [value if v is None or not math.isfinite(v) else v for v in ci]
        low.append(max(0.0, value - ci[0]))
        high.append(max(0.0, ci[1] - value))
    return np.array([low, high])


def _plot_layers(inputs: Inputs):
    import matplotlib.pyplot as plt

    single = [r for r in inputs.main if r["stage"] == "probe" and len(r["layers"]) == 1 and not r["baseline"]]
    curves: dict[tuple[str, str], list[dict]] = {}
    for r in single:
        curves.setdefault((_vectors(r), r["head"]), []).append(r)
    curves = {k: sorted(v, key=lambda r: r["layers"][0]) for k, v in curves.items() if len(v) > 1}
    if not curves:
        return None
    primary = single[0]["primary_metric"]
    figure, axis = plt.subplots(figsize=(7.5, 4))
    for (pooling, head), records in sorted(curves.items()):
        axis.errorbar([r["layers"][0] for r in records], [r["metrics"][primary] for r in records],
                      yerr=_ci_error(records, primary), marker="o", capsize=3, label=f"{pooling} + {head}")
    _tuned_levels(inputs.main, primary, axis)
    axis.set(xlabel="layer (0 = embeddings)", ylabel=f"{primary} (95% interval)", title="Probe quality by layer")
    _legend_outside(axis)
    return figure


def _vectors(record: dict) -> str:
    """A probe's vectors without their layers: `mean`, or a pair combination `bi:mean`."""
    return record["pooling"] if record["combine"] == "joint" else f"{record['combine']}:{record['pooling']}"


def _plot_heads(inputs: Inputs):
    """Each head's best probe and each feature set's best, the frozen choice marked, with their
    95% intervals on an axis fitted to the values (differences of a point must show), against
    the fine-tune and the baselines."""
    import matplotlib.pyplot as plt
    import numpy as np

    probes = [r for r in inputs.main if r["stage"] == "probe" and r["protocol"]["name"] != "mteb"
              and not r["baseline"]]
    choice = inputs.choice
    if not probes or choice is None:
        return None
    primary = choice.record["primary_metric"]
    probes = [r for r in probes if r["primary_metric"] == primary]
    best = lambda group: max(group, key=selection_score)  # noqa: E731
    shown = {id(choice.record): choice.record}
    for key in ({r["head"] for r in probes}):
        r = best([p for p in probes if p["head"] == key])
        shown.setdefault(id(r), r)
    for key in ({_vectors(r) for r in probes}):
        r = best([p for p in probes if _vectors(p) == key])
        shown.setdefault(id(r), r)
    rows = sorted(shown.values(), key=lambda r: r["metrics"][primary])
    figure, axis = plt.subplots(figsize=(7.5, 0.9 + 0.32 * len(rows)))
    y = np.arange(len(rows))
    errors = _ci_error(rows, primary)
    colours = ["#d62728" if r is choice.record else "#1f77b4" for r in rows]
    axis.errorbar([r["metrics"][primary] for r in rows], y, xerr=errors, fmt="none", ecolor="grey", capsize=2)
    axis.scatter([r["metrics"][primary] for r in rows], y, c=colours, zorder=3, s=25)
    axis.set_yticks(y, [f"{r['features']} {r['head']}" + ("  (the frozen choice)" if r is choice.record else "")
                        for r in rows], fontsize=7)
    levels = [r["metrics"][primary] - e for r, e in zip(rows, errors[0])] + \
             [r["metrics"][primary] + e for r, e in zip(rows, errors[1])]
    for record in inputs.main:
        if record["stage"] == "finetune" and record["primary_metric"] == primary:
            axis.axvline(record["metrics"][primary], linestyle="--", color="black", linewidth=1,
                         label=f"fine-tuned ({record['head']})" + (", a lower bound" if record["converged"] is False else ""))
            levels.append(record["metrics"][primary])
        elif record["baseline"] and record["primary_metric"] == primary and math.isfinite(record["metrics"][primary]):
            axis.axvline(record["metrics"][primary], linestyle=":" if record["baseline"] == "majority" else "-.",
                         color="grey", linewidth=1, label=f"baseline: {record['head']}")
            levels.append(record["metrics"][primary])
    finite = [v for v in levels if math.isfinite(v)]
    if finite:  # the axis spans the values, not 0 to 1: a point's difference must be visible
        low, high = min(finite), max(finite)
        margin = max(0.01, 0.08 * (high - low))
        axis.set_xlim(low - margin, high + margin)
    axis.set(xlabel=f"{primary} on {choice.record['protocol']['report_on']} (95% interval)",
             title="Each head's and each feature set's best probe, against fine-tuning")
    if axis.get_legend_handles_labels()[0]:
        _legend_outside(axis)
    return figure


def _plot_curve(inputs: Inputs):
    import matplotlib.pyplot as plt

    tunes = [r for r in inputs.main + inputs.control if r["stage"] == "finetune" and r["curve"]]
    if not tunes:
        return None
    figure, loss_axis = plt.subplots(figsize=(7.5, 4))
    metric_axis = loss_axis.twinx()
    for record in tunes:
        label = f"{record['features']} {record['head']} ({record['init']})"
        steps, losses = zip(*record["curve"]["loss"]) if record["curve"]["loss"] else ((), ())
        # Markers: a short run has a few points, which a bare line would not show.
        loss_axis.plot(steps, losses, marker="." if len(steps) < 50 else None, label=f"loss, {label}")
        per_step = record["steps"] / max(record["epochs"], 1)
        # Every learning rate the search tried, the chosen one solid: where each stopped, and why.
        for candidate in record["search"] or [{"params": {}, "curve": record["curve"]["select"]}]:
            if not candidate.get("curve"):
                continue
            epochs, values = zip(*candidate["curve"])
            chosen = candidate.get("params", {}).get("learning_rate") in (None, record["learning_rate"])
            lr = candidate.get("params", {}).get("learning_rate")
            metric_axis.plot([e * per_step for e in epochs], values, marker="s", markersize=4,
                             linestyle="-" if chosen else ":", color="black" if chosen else "grey",
                             label=f"{record['primary_metric']} per epoch (selection split)"
                                   + (f", lr {lr:g}" if lr else "")
                                   + (f", stopped by {candidate.get('stopped_by')}" if candidate.get("stopped_by") else ""))
    loss_axis.set(xlabel="step (of the chosen learning rate)", ylabel="training loss",
                  title="Fine-tuning: training loss and the selection score per epoch")
    metric_axis.set_ylabel("selection metric")
    handles = loss_axis.get_legend_handles_labels()
    more = metric_axis.get_legend_handles_labels()
    loss_axis.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7, loc="upper center",
                     bbox_to_anchor=(0.5, -0.15), ncol=2)
    return figure


def _plot_cost(inputs: Inputs):
    """Quality against wall time: every probe pays the shared extraction pass plus its own fit;
    the fine-tune its whole search. The best frozen probe, the fine-tunes and the baselines are
    labelled."""
    import matplotlib.pyplot as plt

    records = [r for r in inputs.main + inputs.control if r["protocol"]["name"] != "mteb"
               and _cost_seconds(r) is not None]
    if not records:
        return None
    primary = records[0]["primary_metric"]
    best = inputs.choice.record if inputs.choice else None
    figure, axis = plt.subplots(figsize=(7.5, 4))
    styles = (("probe", "pretrained", "o", "frozen + head"), ("finetune", "pretrained", "*", "fine-tuned"),
              ("probe", "random", "x", "frozen + head (random init)"), ("finetune", "random", "+", "fine-tuned (random init)"))
    for stage, init, marker, name in styles:
        chosen = [r for r in records if r["stage"] == stage and r["init"] == init and not r["baseline"]]
        if chosen:
            axis.scatter([_cost_seconds(r) for r in chosen], [r["metrics"][primary] for r in chosen],
                         marker=marker, s=60, label=name)
    baselines = [r for r in records if r["baseline"]]
    if baselines:
        axis.scatter([_cost_seconds(r) for r in baselines], [r["metrics"][primary] for r in baselines],
                     marker="v", s=50, color="grey", label="baselines (no backbone)")
    right = max(_cost_seconds(r) for r in records)
    for r in records:
        if r is best or r["stage"] == "finetune" or r["baseline"]:
            on_right = _cost_seconds(r) > right / 10  # labels of the rightmost points go to their left
            axis.annotate(f"{r['features']} {r['head']}", (_cost_seconds(r), r["metrics"][primary]),
                          textcoords="offset points", xytext=(-6 if on_right else 6, 4), fontsize=7,
                          ha="right" if on_right else "left")
    axis.set_xscale("log")
    axis.set(xlabel="wall seconds (extraction + fit; fine-tune: its whole search)", ylabel=primary,
             title="Quality against cost")
    _legend_outside(axis)
    return figure


def _cost_seconds(record: dict) -> float | None:
    if record["stage"] == "finetune":
        return record["wall_seconds"]
    fit = record["fit_seconds"]
    return None if fit is None else fit + (record["extract_seconds"] or 0.0)


# ---------------------------------------------------------------------------------------------
# Writing


def table_rows(all_rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the report table (markdown and HTML share it)."""
    task_metrics = [k.removeprefix("metric:") for k in all_rows[0] if k.startswith("metric:")]
    primary = all_rows[0]["primary_metric"]
    header = ["features", "head", "init", "protocol", f"{primary} (95% interval)", "selection",
              *[m for m in task_metrics if m != primary], "train s", "backbone passes", "cache MB", "note"]
    cells = []
    for row in all_rows:
        std = f" ± {row['primary_std']:.4f}" if row["primary_std"] else ""
        interval = (f" [{row['primary_ci_low']:.4f}, {row['primary_ci_high']:.4f}]"
                    if _finite(row["primary_ci_low"]) and _finite(row["primary_ci_high"]) else "")
        note = {"majority": "baseline: majority", "lexical": "baseline: TF-IDF"}.get(row["baseline"], "")
        if row["converged"] is False:
            note = "not converged: a lower bound"
        cells.append([row["features"], row["head"], row["init"], row["protocol"],
                      f"{_num(row['primary'])}{std}{interval}", _num(row["selection"]),
                      *[_num(row.get(f"metric:{k}")) for k in task_metrics if k != primary],
                      _num(row["train_seconds"], 1), f"{row['backbone_forward_passes'] or 0:,}",
                      "" if row["baseline"] else _num(row["cache_mb"], 1), note])
    return header, cells


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _num(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def write_report(runs_dir: str | Path, reports_dir: str | Path, pipeline: str,
                 current: Pipeline | None = None) -> dict[str, Path]:
    """Build the report for one pipeline (with `current`, of its present configuration's records
    only); returns the paths written (md, html, csv, and json: the verdict with its numbers)."""
    from featx.files import writable_dir

    inputs = collect(runs_dir, pipeline, current)
    root = Path(reports_dir).parent
    out_dir = writable_dir(Path(reports_dir) / pipeline, "the report directory", root=root)
    all_rows = rows(inputs)
    header, cells = table_rows(all_rows)
    judged = verdict(inputs, runs_dir, current)
    images = plots(inputs, _matplotlib_dir(Path(reports_dir) / ".matplotlib", root))
    notes = _notes(inputs)
    paths = {"md": out_dir / "report.md", "html": out_dir / "report.html", "csv": out_dir / "results.csv",
             "json": out_dir / "verdict.json"}
    contents = {out_dir / f"{name}.png": data for name, data in images.items()}
    contents[paths["md"]] = _markdown(inputs, header, cells, judged, images, notes).encode()
    contents[paths["html"]] = _html(inputs, header, cells, judged, images, notes).encode()
    contents[paths["csv"]] = _csv_text(all_rows).encode()
    contents[paths["json"]] = _json_text(judged).encode()
    write_all(contents)
    return paths


def write_all(contents: dict[Path, bytes]) -> None:
    """Every report file, or none: each is written whole to a temporary file first, and only
    when all of them are (a full disk fails here, replacing nothing) are they renamed into
    place, which needs no space."""
    from featx.files import refuse_link, write_bytes

    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in contents.items():
            refuse_link(path, "where featx writes the report")
            staged.append((write_bytes(path.with_name(f".{path.name}.staged"), data), path))
        for keep, path in staged:
            os.replace(keep, path)
    except OSError as exc:
        raise FeatxError(f"cannot write the report in {path.parent} ({exc.strerror}); the previous "
                         "report is left as it was") from None
    finally:
        for keep, _ in staged:
            if os.path.lexists(keep):
                os.unlink(keep)


def _matplotlib_dir(folder: Path, root: Path) -> Path:
    """matplotlib's cache folder in the data directory, holding no link (matplotlib writes its
    font cache there without asking whether a name is a link)."""
    from featx.files import refuse_link, writable_dir

    writable_dir(folder, "matplotlib's cache folder", root=root)
    for entry in folder.iterdir():
        refuse_link(entry, "in matplotlib's cache folder")
    return folder


def _json_text(judged: "Verdict") -> str:
    import json

    pick = lambda r: None if r is None else {k: r.get(k) for k in (  # noqa: E731
        "features", "head", "init", "primary_metric", "metrics", "metrics_ci", "n_eval", "converged")}
    return json.dumps({"text": judged.text, "frozen": pick(judged.frozen), "tuned": pick(judged.tuned),
                       "quality_ratio": judged.quality_ratio, "compute_ratio": judged.compute_ratio,
                       "comparison": judged.comparison, "lexical": judged.lexical}, indent=1) + "\n"


def _notes(inputs: Inputs) -> list[str]:
    notes = list(inputs.notes)
    stages = {r["stage"] for r in inputs.main}
    if "probe" not in stages:
        notes.append("No probe records: run `make probe`.")
    if "finetune" not in stages:
        notes.append("No fine-tune record: run `make finetune` for the baseline.")
    if not inputs.control:
        notes.append("No random-init control: `featx extract PIPELINE model.init=random` then "
                     "`featx probe` / `featx finetune` with the same override.")
    if inputs.ignored_caches:
        notes.append(f"{inputs.ignored_caches} older cache(s) of this pipeline were left out.")
    if inputs.main:
        first = inputs.main[0]
        notes.append(f"Task: {first['task']}; cache key {first['cache_key'][:16]}; primary metric "
                     f"{first['primary_metric']} (higher is better).")
    return notes + _label_notes(inputs.main, inputs.choice) + _truncation_notes(inputs.main)


def _label_notes(records: list[dict], choice) -> list[str]:
    """Multilabel: the labels the macro metrics average over, the labels no head could learn,
    the labels each selection fold of the best frozen probe could score."""
    # A probe's summary first: its training rows are all of train (a fine-tune without a dev
    # split trains on 90% of them).
    described = sorted((r for r in records if r["labels"]), key=lambda r: r["stage"] != "probe")
    if not described:
        return []
    summary, split = described[0]["labels"], described[0]["protocol"]["report_on"]
    notes = [f"Labels: macro_f1 averages over the {summary['macro_f1']} of {summary['total']} labels with "
             f"a positive {split} row, macro_roc_auc over the {summary['macro_roc_auc']} with a positive "
             "and a negative one; micro_f1 counts every label."]
    constant = summary["constant_in_train"]
    if constant:
        notes.append(f"{len(constant)} label(s) never (or always) present in the training split are "
                     f"predicted as that constant by every head: {', '.join(constant[:10])}"
                     f"{', ...' if len(constant) > 10 else ''}.")
    frozen = choice.record if choice else None
    folds = frozen["selection_labels"] if frozen else None
    if folds and any(f["labels_scored"] < summary["total"] for f in folds):
        notes.append(f"The best frozen probe was selected on {frozen['protocol']['select_on']}: "
                     "labels with a positive held-out row per selection split: "
                     f"{', '.join(str(f['labels_scored']) for f in folds)} of {summary['total']}.")
    return notes


def _truncation_notes(records: list[dict]) -> list[str]:
    """Texts longer than max_length lose their end: how many the fine-tune cut (its record
    counts them; extraction cut the same texts for the probes)."""
    notes = []
    for tune in (r for r in records if r["stage"] == "finetune" and r["truncated"]):
        cut = tune["truncated"]
        if cut["train"] or cut["report"]:
            notes.append(f"The fine-tune ({tune['head']}) truncated {cut['train']:,} of "
                         f"{tune['n_train']:,} training texts at max_length = {cut['max_length']} "
                         f"tokens, and {cut['report']:,} of {tune['n_eval']:,} "
                         f"{tune['protocol']['report_on']} texts.")
    return notes


def _markdown(inputs, header, cells, judged, images, notes) -> str:
    lines = [f"# featx report: {inputs.pipeline}", "", f"**Verdict.** {judged.text}", ""]
    lines += [f"- {n}" for n in notes] + [""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in cells]
    lines.append("")
    for name in images:
        lines += [f"![{name}]({name}.png)", ""]
    return "\n".join(lines)


def _html(inputs, header, cells, judged, images, notes) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
             f"<title>featx report: {e(inputs.pipeline)}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:3px 6px;text-align:right}td:first-child,th:first-child{text-align:left}"
             "img{max-width:100%}</style></head><body>",
             f"<h1>featx report: {e(inputs.pipeline)}</h1>",
             f"<p><strong>Verdict.</strong> {_code(e(judged.text))}</p>", "<ul>"]
    parts += [f"<li>{_code(e(n))}</li>" for n in notes] + ["</ul>", "<table>"]
    parts.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
    parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in cells]
    parts.append("</table>")
    for name, data in images.items():
        encoded = base64.b64encode(data).decode()
        parts.append(f'<h2>{e(name.replace("_", " "))}</h2>'
                     f'<img alt="{e(name)}" src="data:image/png;base64,{encoded}">')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _code(escaped: str) -> str:
    """`text` -> <code>text</code>: the notes' commands, set as code instead of backticks."""
    import re

    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def _csv_text(all_rows: list[dict]) -> str:
    fields = list(dict.fromkeys(k for row in all_rows for k in row))
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    writer.writerows(all_rows)
    return buffer.getvalue()
