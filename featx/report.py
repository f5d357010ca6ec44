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
from featx.config import Pipeline
from featx.configfile import command
from featx.errors import FeatxError
from featx.records import FrozenChoice, best_tuned, frozen_choice, made_by, read_records, selection_score

# How the verdict reads the quality ratio (best frozen / fine-tuned primary metric).
GOOD_ENOUGH, CLOSE = 0.98, 0.90


@dataclass
class Inputs:
    pipeline: str
    main: list[dict]
    """Records of the configuration reported, on its cache: probes and fine-tunes."""
    control: list[dict]
    """Records of the same configuration on the random-init control's cache, if any."""
    notes: list[str] = dataclasses.field(default_factory=list)
    """What is incomplete (an interrupted probe) or uncertain (no cache to check the records by)."""
    others: list[str] = dataclasses.field(default_factory=list)
    """The pipeline's other configurations with records, each with the command that reports it."""
    current: "Pipeline | None" = None
    """The pipeline as configured for this report (None: a library call on records alone)."""
    choice: "FrozenChoice | None" = None
    """The verdict's frozen configuration (`records.frozen_choice` on `main`), chosen once so the
    verdict, the plots and the notes name the same one."""


def collect(runs_dir: str | Path, pipeline: str, current: "Pipeline | None" = None) -> Inputs:
    """The records of one configuration of the pipeline, never a mix of two.

    With `current` (the pipeline as configured now, overrides included): the records its
    configuration made (its probe config hash, fine-tunes of its settings) on its cache (the one
    `featx extract` with the same overrides finds) and on its random-init control's cache.
    Records only under other overrides are an error that names each configuration with the
    command that reports it. Without `current` (a library call on records alone): the newest
    probe configuration and the newest fine-tune of the newest pretrained cache."""
    from featx.configfile import make_command
    from featx.records import elsewhere

    root = Path(runs_dir) / pipeline
    folders = sorted(d for d in root.glob("*") if d.is_dir()) if root.is_dir() else []
    everything = [r for d in folders for r in read_records(d) if r["pipeline"] == pipeline]
    older = [d.name for d in folders if (d / "probe").is_dir() or (d / "finetune").is_dir()]
    legacy = (f" (the records under {root}/{older[0]}/probe and /finetune are in an earlier featx's "
              "layout, which this one does not read: rerun the stages)") if older else ""
    if not everything:
        raise FeatxError(f"no run records for pipeline {pipeline!r} under {runs_dir}{legacy}: run "
                         f"`{command(current, 'probe')}` (`{make_command(current, 'probe')}`), and "
                         "the fine-tune, first")
    if current is None:
        main, control = _newest(everything)
        return Inputs(pipeline, main, control, notes=[], choice=frozen_choice(main, runs_dir))
    main, control, notes = _current(runs_dir, everything, current)
    shown = {id(r) for r in main + control}
    others = elsewhere([r for r in everything if id(r) not in shown], current, "report")
    if not main:
        listed = "".join(f"\n  - {line}" for line in others)
        raise FeatxError(
            f"no run records of this configuration of pipeline {pipeline!r} ({_brief(current)})"
            + (f"; records exist under other settings (the command that reports each):{listed}\n"
               if others else "; ")
            + f"to make this configuration's: `{command(current, 'all')}` (`{make_command(current, 'all')}`)"
            + legacy)
    if legacy:
        said = legacy.strip(" ()")
        notes.append(said[0].upper() + said[1:] + ".")
    return Inputs(pipeline, main, control, notes, others, current, frozen_choice(main, runs_dir))


def _brief(pipeline: "Pipeline") -> str:
    return (f"model {pipeline.model.name}, init {pipeline.model.init}, probe protocol "
            f"{pipeline.probe.protocol}, grid {pipeline.probe.grid}")


def _newest(everything: list[dict]) -> tuple[list[dict], list[dict]]:
    """(main, control) without a pipeline: on the newest pretrained (and random-init) cache, the
    records of its newest probe configuration and of its newest fine-tune."""
    def pick(init: str) -> list[dict]:
        records = [r for r in everything if r["init"] == init]
        if not records:
            return []
        key = max(records, key=lambda r: r["created"])["cache_key"]
        records = [r for r in records if r["cache_key"] == key]
        chosen = []
        for stage, field in (("probe", "config_hash"), ("finetune", "run_hash")):
            staged = [r for r in records if r["stage"] == stage]
            if staged:
                newest = max(staged, key=lambda r: r["created"])[field]
                chosen += [r for r in staged if r[field] == newest]
        return chosen
    return pick("pretrained"), pick("random")


def _current(runs_dir, everything: list[dict], current: "Pipeline") -> tuple[list[dict], list[dict], list[str]]:
    """(main, control, notes) of the pipeline as configured: its records on its cache; when it
    has no cache, on the newest cache of the same settings, said first."""
    from featx.plan import find_cache, last_cache_key
    from featx.records import probe_config_hash, probe_dir

    mine = [r for r in everything if made_by(r, current)]
    notes = []
    try:
        key16 = find_cache(current).stem
        main = [r for r in mine if r["cache_key"][:16] == key16 and r["init"] == current.model.init]
    except FeatxError as exc:
        # No cache for the pipeline as it is now: the cache its extraction wrote last, if its
        # records are of these model and extraction settings, else the newest of all these settings.
        last = last_cache_key(current)
        main = [r for r in mine if r["cache_key"][:16] == last and r["init"] == current.model.init
                and _same_cache_settings(r, current, current.model.init, sections=("model", "extract"))]
        main = main or _newest_cache([r for r in mine if r["init"] == current.model.init
                                      and _same_cache_settings(r, current, current.model.init)])
        if main:
            notes.append(f"The pipeline as it is now has no cache ({str(exc)[:160]}): if a data or model file "
                         "changed since these records were made, they describe other data; rerun `featx "
                         "extract`, `featx probe` and `featx finetune` before trusting this report.")
    control = []
    if main and current.model.init == "pretrained":
        fingerprint = (main[0]["backbone"] or {}).get("fingerprint")
        control = _newest_cache([r for r in mine if r["init"] == "random" and _same_cache_settings(r, current, "random")
                                 and (r["backbone"] or {}).get("fingerprint") == fingerprint])
    for records in (main, control):
        if records:
            folder = probe_dir(runs_dir, current.name, records[0]["cache_key"], probe_config_hash(current.probe))
            notes += _interrupted(folder, current, len([r for r in records if r["stage"] == "probe"]))
    return main, control, notes


def _same_cache_settings(record: dict, pipeline: "Pipeline", init: str,
                         sections: tuple[str, ...] = ("data", "model", "extract")) -> bool:
    """Whether a record was made on a cache of the pipeline's data, model (with `init`) and
    extraction settings (those of `sections`), as its `configuration` says."""
    from featx.records import configuration

    recorded = record["configuration"]
    if not isinstance(recorded, dict):
        return False
    now = configuration(pipeline)
    now["model"]["init"] = init
    return all(recorded.get(section) == now[section] for section in sections)


def _newest_cache(records: list[dict]) -> list[dict]:
    if not records:
        return []
    key = max(records, key=lambda r: r["created"])["cache_key"]
    return [r for r in records if r["cache_key"] == key]


def _interrupted(directory: Path, pipeline: "Pipeline", found: int) -> list[str]:
    from featx.records import probe_config_hash, probe_interrupted

    run = probe_interrupted(directory, probe_config_hash(pipeline.probe))
    if run is None:
        return []
    return [f"The probe run was interrupted: {found} of its {run.get('planned')} fits have records; rerun "
            f"`{command(pipeline, 'probe')}` to finish it (finished fits are redone, not lost)."]


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
        mteb = [r for r in inputs.main if r["stage"] == "probe" and r["protocol"]["name"] == "mteb"]
        if mteb:
            return Verdict(f"No verdict: the mteb protocol reproduces MTEB's classification evaluator "
                           f"({mteb[0]['features']}: accuracy = {_with_ci(mteb[0], 'accuracy')}), a check "
                           "against leaderboard numbers, not a frozen side to set against a fine-tune; "
                           f"the verdict rests on the default protocol's probes: {run('probe', 'probe.protocol=auto')}.",
                           None, None, None, None)
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
    from featx.records import read_predictions, record_dir

    if runs_dir is None or a["task"] != b["task"]:
        return None
    try:
        pa = read_predictions(record_dir(runs_dir, a), a)
        pb = read_predictions(record_dir(runs_dir, b), b)
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
                                   + (f", lr {lr:g}" if lr else "") + f": {_stopped(record, candidate)}")
    loss_axis.set(xlabel="step (of the chosen learning rate)", ylabel="training loss",
                  title="Fine-tuning: training loss and the selection score per epoch")
    metric_axis.set_ylabel("selection metric")
    handles = loss_axis.get_legend_handles_labels()
    more = metric_axis.get_legend_handles_labels()
    loss_axis.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7, loc="upper center",
                     bbox_to_anchor=(0.5, -0.15), ncol=2)
    return figure


def _stopped(record: dict, candidate: dict) -> str:
    """Why a learning rate's curve ends, in the record's own words (featx.records.stop_reason):
    the chosen one's are the record's `converged` and `stopped_by`, whatever its search entry says."""
    from featx.records import stop_reason

    chosen = candidate.get("params", {}).get("learning_rate") in (None, record["learning_rate"])
    if chosen:
        return stop_reason(record["converged"], record["stopped_by"])
    return stop_reason(candidate.get("converged"), candidate.get("stopped_by"))


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
    """Build the report of one configuration of a pipeline (with `current`, of the pipeline as
    configured, else of its newest records) in its own folder, `reports/<pipeline>/<config id>/`,
    and the pipeline's index of configurations beside them; returns the paths written (md, html,
    csv, json: the verdict with its numbers and the configuration; index, latest)."""
    from featx.files import writable_dir

    inputs = collect(runs_dir, pipeline, current)
    described = configuration_of(inputs)
    root = Path(reports_dir).parent
    base = Path(reports_dir) / pipeline
    out_dir = writable_dir(base / described["id"], "the report directory", root=root)
    all_rows = rows(inputs)
    header, cells = table_rows(all_rows)
    judged = verdict(inputs, runs_dir, current)
    images = plots(inputs, _matplotlib_dir(Path(reports_dir) / ".matplotlib", root))
    notes = _notes(inputs)
    settings = _configuration_lines(inputs, described)
    paths = {"md": out_dir / "report.md", "html": out_dir / "report.html", "csv": out_dir / "results.csv",
             "json": out_dir / "verdict.json", "index": base / "index.md", "latest": base / "latest.json"}
    contents = {out_dir / f"{name}.png": data for name, data in images.items()}
    contents[paths["md"]] = _markdown(inputs, header, cells, judged, images, notes, settings).encode()
    contents[paths["html"]] = _html(inputs, header, cells, judged, images, notes, settings).encode()
    contents[paths["csv"]] = _csv_text(all_rows).encode()
    contents[paths["json"]] = _json_text(judged, described).encode()
    index, latest = _index(base, described, judged)
    contents[paths["index"]], contents[paths["latest"]] = index.encode(), latest.encode()
    write_all(contents)
    return paths


# ---------------------------------------------------------------------------------------------
# The configuration a report rests on, and the index of a pipeline's reports


def configuration_of(inputs: Inputs) -> dict:
    """What the report's records rest on: the backbone (name, fingerprint, revision), the
    extraction, the probe and the fine-tune settings, and the id of this configuration
    (`<cache key[:8]>-<probe config hash[:8]>-<fine-tune settings hash[:8]>`), which names its
    report folder."""
    from featx.files import utc_now
    from featx.records import finetune_config_hash, probe_config_hash, settings_hash

    probes = [r for r in inputs.main if r["stage"] == "probe"]
    tunes = [r for r in inputs.main if r["stage"] == "finetune"]
    probe = max(probes, key=lambda r: r["created"]) if probes else None
    tune = max(tunes, key=lambda r: r["created"]) if tunes else None
    source = probe or tune or max(inputs.control, key=lambda r: r["created"])  # a control alone: its own
    recorded = (probe["configuration"] if probe else None) or {}
    tuned = (tune["configuration"] if tune else None) or {}
    current = inputs.current
    if current is not None:
        probe_hash, tune_hash = probe_config_hash(current.probe), finetune_config_hash(current.finetune)
    else:
        probe_hash = probe["config_hash"] if probe else None
        tune_hash = (settings_hash(tuned["finetune"]) if "finetune" in tuned
                     else tune["run_hash"] if tune else None)
    config_id = "-".join(part[:8] if part else "none" for part in (source["cache_key"], probe_hash, tune_hash))
    return {"id": config_id, "pipeline": inputs.pipeline, "cache_key": source["cache_key"], "written": utc_now(),
            "backbone": source["backbone"] or {}, "extraction": source["extraction"] or {},
            "extract": recorded.get("extract") or tuned.get("extract") or {},
            "data": recorded.get("data") or tuned.get("data") or {},
            "probe": recorded.get("probe"), "probe_config_hash": probe_hash,
            "protocol": probe["protocol"] if probe else None,
            "finetune": None if tune is None else (tune["hyperparameters"] if "hyperparameters" in tune else {}),
            "finetune_settings": tuned.get("finetune") or (dataclasses.asdict(current.finetune) if current else None),
            "run_hash": tune["run_hash"] if tune else None,
            "stopped": None if tune is None else _stop(tune),
            "device": tune["device"] if tune and "device" in tune else "?",
            "command": command(current, "report"), "make": _make(current, "report")}


def _stop(tune: dict) -> str:
    from featx.records import stop_reason

    return stop_reason(tune["converged"], tune["stopped_by"])


def _make(pipeline, target: str) -> str:
    from featx.configfile import make_command

    return make_command(pipeline, target)


def _configuration_lines(inputs: Inputs, d: dict) -> list[str]:
    """The report's "Configuration" list: the backbone and every setting the numbers rest on."""
    backbone, extraction = d["backbone"], d["extraction"]
    lines = []
    if backbone.get("name"):
        lines.append(f"Backbone: `{backbone['name']}` (fingerprint `{str(backbone.get('fingerprint'))[:16]}`, "
                     f"revision {_code_or(backbone.get('revision'), 'none (the files as found)')}, "
                     f"init {backbone.get('init')}"
                     + (f", seed {backbone['init_seed']}" if backbone.get("init_seed") is not None else "")
                     + f"; from {backbone.get('source') or 'its folder'}).")
    else:
        lines.append("Backbone: not recorded (records of an older featx).")
    layers = extraction.get("layers") or {}
    stored = "; ".join(f"{p} {_span(v)}" for p, v in layers.items()) if isinstance(layers, dict) else ""
    dropped = extraction.get("dropped_empty") or {}
    extract = d["extract"]
    lines.append(f"Extraction: poolings and layers stored: {stored or 'not recorded'}; max_length "
                 f"{extraction.get('max_length', extract.get('max_length'))}; prompt "
                 f"{_code_or(extraction.get('prompt'), 'none')}; compute {extraction.get('compute_dtype', '?')}, "
                 f"stored {extraction.get('store_dtype', '?')}; rows dropped for an empty text: "
                 + (", ".join(f"{s} {n}" for s, n in dropped.items()) if dropped else "none")
                 + f"; cache key `{d['cache_key'][:16]}`.")
    probe, protocol = d["probe"], d["protocol"]
    if probe:
        chosen = (f" ({protocol['name']}: chosen on {protocol['select_on']}, reported on {protocol['report_on']})"
                  if protocol else "")
        lines.append(f"Probe (config `{d['probe_config_hash']}`): protocol {probe['protocol']}{chosen}; grid "
                     f"{probe['grid']}; heads {', '.join(probe['heads'])}; baselines "
                     f"{', '.join(probe['baselines']) or 'none'}; poolings {_listed(probe['poolings'], 'every one cached')}; "
                     f"layers {_listed(probe['layers'], '?')}; seeds {_listed(probe['seeds'], '?')}; metric "
                     f"{probe['metric'] or 'the task default'}.")
    elif protocol:
        lines.append(f"Probe: protocol {protocol['name']} (chosen on {protocol['select_on']}, reported on "
                     f"{protocol['report_on']}); its other settings are not recorded.")
    else:
        lines.append("Probe: no record of this configuration yet.")
    tuned = d["finetune"]
    if tuned is not None:
        lines.append(f"Fine-tune (run `{str(d['run_hash'])[:16]}`): head {tuned.get('head_input')}"
                     + (" with LP-FT" if tuned.get("init_head_from_probe") else "")
                     + f"; learning rates {_listed(tuned.get('learning_rates'), '?')} (search {tuned.get('search')}); "
                     f"batch {tuned.get('batch_size')}; up to {tuned.get('max_epochs')} epochs"
                     + (f" or {tuned['max_seconds']:g} s" if tuned.get("max_seconds") else "")
                     + f", patience {tuned.get('patience')} (min_delta {tuned.get('min_delta')}); seed "
                     f"{tuned.get('seed')}; {tuned.get('dtype')} on {d['device']}; {d['stopped']}.")
    else:
        lines.append("Fine-tune: no record of this configuration yet.")
    lines.append(f"This configuration: `{d['id']}`; this report: `{d['command']}` (`{d['make']}`); every "
                 "stage takes the same overrides.")
    if inputs.others:
        lines.append("Other configurations of this pipeline with records (the command that reports each): "
                     + " | ".join(inputs.others))
    return lines


def _code_or(value, absent: str) -> str:
    return absent if value in (None, "") else f"`{value}`"


def _listed(values, absent: str) -> str:
    if values is None:
        return absent
    return ", ".join(str(v) for v in values) if isinstance(values, (list, tuple)) else str(values)


def _span(layers) -> str:
    """[0, 1, 2, 3] -> "0-3", [6] -> "6"."""
    if not isinstance(layers, list) or not layers:
        return str(layers)
    if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 2:
        return f"{layers[0]}-{layers[-1]}"
    return ",".join(map(str, layers))


def _index(base: Path, described: dict, judged: "Verdict") -> tuple[str, str]:
    """(index.md, latest.json) of a pipeline's reports: every configuration's report folder, the
    newest first, and a stable pointer to the one just written (no link: a file)."""
    import json

    from featx.files import loads_json

    entries = {}
    for path in sorted(base.glob("*/verdict.json")):
        try:
            found = loads_json(path.read_text())["configuration"]
            entries[found["id"]] = found | {"headline": str(found.get("headline", ""))}
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a report folder of an older featx, or a damaged one: left out of the index
    entries[described["id"]] = described | {"headline": _headline(judged.text)}
    ordered = sorted(entries.values(), key=lambda e: str(e.get("written")), reverse=True)
    cell = lambda value: str(value).replace("|", "/").replace("\n", " ")  # noqa: E731
    lines = [f"# featx reports: {described['pipeline']}", "",
             f"Latest: [{described['id']}]({described['id']}/report.md), written {described['written']} "
             f"(`{described['command']}`).", "",
             "| configuration | backbone | fingerprint | init | probe | fine-tune | written | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for e in ordered:
        backbone = e.get("backbone") if isinstance(e.get("backbone"), dict) else {}
        probe = e.get("probe") if isinstance(e.get("probe"), dict) else {}
        tuned = e.get("finetune") if isinstance(e.get("finetune"), dict) else {}
        lines.append("| " + " | ".join(cell(v) for v in (
            f"[{e['id']}]({e['id']}/report.md)", backbone.get("name", "?"), str(backbone.get("fingerprint", "?"))[:12],
            backbone.get("init", "?"), f"{probe.get('protocol', '-')}, {probe.get('grid', '-')}" if probe else "-",
            f"{tuned.get('head_input')}, lr {_listed(tuned.get('learning_rates'), '?')}" if tuned else "-",
            e.get("written", "?"), e.get("headline", ""))) + " |")
    latest = {"id": described["id"], "report": f"{described['id']}/report.md",
              "html": f"{described['id']}/report.html", "verdict": f"{described['id']}/verdict.json",
              "written": described["written"], "command": described["command"]}
    return "\n".join(lines) + "\n", json.dumps(latest, indent=1) + "\n"


def _headline(text: str) -> str:
    """The verdict's first sentence, for the index."""
    first = text.split(". ")[0]
    return first if first.endswith(".") else first + "."


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


def _json_text(judged: "Verdict", described: dict) -> str:
    import json

    pick = lambda r: None if r is None else {k: r.get(k) for k in (  # noqa: E731
        "features", "head", "init", "primary_metric", "metrics", "metrics_ci", "n_eval", "converged")}
    return json.dumps({"text": judged.text, "frozen": pick(judged.frozen), "tuned": pick(judged.tuned),
                       "quality_ratio": judged.quality_ratio, "compute_ratio": judged.compute_ratio,
                       "comparison": judged.comparison, "lexical": judged.lexical,
                       "configuration": described | {"headline": _headline(judged.text)}},
                      indent=1, default=str) + "\n"


def _notes(inputs: Inputs) -> list[str]:
    notes = list(inputs.notes)
    stages = {r["stage"] for r in inputs.main}
    current = inputs.current
    if "probe" not in stages:
        notes.append(f"No probe records of this configuration: run `{command(current, 'probe')}` "
                     f"(`{_make(current, 'probe')}`).")
    if "finetune" not in stages:
        notes.append(f"No fine-tune record of this configuration: run `{command(current, 'finetune')}` "
                     f"(`{_make(current, 'finetune')}`) for the baseline.")
    if not inputs.control:
        notes.append(f"No random-init control: `{command(current, 'extract', 'model.init=random')}`, then "
                     "`featx probe` and `featx finetune` with the same overrides.")
    if inputs.main:
        first = inputs.main[0]
        notes.append(f"Task: {first['task']}; primary metric {first['primary_metric']} (higher is better).")
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


def _markdown(inputs, header, cells, judged, images, notes, settings) -> str:
    lines = [f"# featx report: {inputs.pipeline}", "", f"**Verdict.** {judged.text}", ""]
    lines += ["## Configuration", ""] + [f"- {n}" for n in settings] + [""]
    lines += ["## Results", ""] + [f"- {n}" for n in notes] + [""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in cells]
    lines.append("")
    for name in images:
        lines += [f"![{name}]({name}.png)", ""]
    return "\n".join(lines)


def _html(inputs, header, cells, judged, images, notes, settings) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
             f"<title>featx report: {e(inputs.pipeline)}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:3px 6px;text-align:right}td:first-child,th:first-child{text-align:left}"
             "img{max-width:100%}</style></head><body>",
             f"<h1>featx report: {e(inputs.pipeline)}</h1>",
             f"<p><strong>Verdict.</strong> {_code(e(judged.text))}</p>", "<h2>Configuration</h2>", "<ul>"]
    parts += [f"<li>{_code(e(n))}</li>" for n in settings] + ["</ul>", "<h2>Results</h2>", "<ul>"]
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
