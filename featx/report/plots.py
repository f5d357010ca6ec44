"""The report's plots: matplotlib figures of the records, returned as PNG bytes.

Probe quality by layer, each head's and feature set's best probe against the fine-tune, the
fine-tune's training curve (loss and selection score per epoch), the learning curve (both sides
against labelled rows), quality against cost. Draws only: the records come from
`featx.report.collected.collect`, and `featx.report.write` writes the images.
"""
from __future__ import annotations

import io
import math
from pathlib import Path

from featx.runs.choice import selection_score
from featx.runs.schema import Record
from featx.report.collected import Collected


def plots(collected: Collected, cache_dir: Path | None = None, curve: dict | None = None) -> dict[str, bytes]:
    """PNG bytes per plot: layers, heads, the fine-tune's training curve, the learning curve over
    labelled rows (`curve`: featx.report.curve.label_curve, when `featx curve` ran) and cost."""
    import os

    if cache_dir is not None and "matplotlib" not in __import__("sys").modules:
        # matplotlib writes its font cache under $HOME unless told otherwise: keep it with featx's data.
        os.environ.setdefault("MPLCONFIGDIR", str(cache_dir))
    import matplotlib
    matplotlib.use("Agg")
    out = {}
    for name, draw in (("layers", _plot_layers), ("heads", _plot_heads), ("training_curve", _plot_training),
                       ("label_curve", lambda _: _plot_label_curve(curve)), ("cost", _plot_cost)):
        figure = draw(collected)
        if figure is not None:
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
            import matplotlib.pyplot as plt
            plt.close(figure)
            out[name] = buffer.getvalue()
    return out


def _tuned_levels(records: list[Record], primary: str, axis) -> None:
    for record in records:
        if record.stage == "finetune":
            axis.axhline(record.metrics[primary], linestyle="--", color="black", linewidth=1,
                         label=f"fine-tuned ({record.features}, {record.shown_head})")


def _legend_outside(axis, **options) -> None:
    """The legend to the right of the axes, never over the data it explains."""
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, **options)


def _ci_error(records: list[Record], primary: str):
    """(2, n) distances from each value to its 95% interval, for error bars (0 when unknown)."""
    import numpy as np

    low, high = [], []
    for r in records:
        value = r.metrics[primary]
        ci = r.metrics_ci[primary] or [value, value]
        ci = [value if v is None or not math.isfinite(v) else v for v in ci]
        low.append(max(0.0, value - ci[0]))
        high.append(max(0.0, ci[1] - value))
    return np.array([low, high])


def _plot_layers(collected: Collected):
    """Probe quality by layer, one curve per vectors and head of one layer each. When the frozen
    choice reads a text pair's texts alone (`bi:`, `cos:`), the curves of those vectors, the ones
    the verdict chose among; the title names the vectors shown."""
    import matplotlib.pyplot as plt

    single = [r for r in collected.main if r.stage == "probe" and len(r.layers) == 1 and not r.baseline]
    pairs = any(r.combine != "joint" for r in single)
    curves: dict[tuple[str, str], list[Record]] = {}
    for r in single:
        curves.setdefault((_vectors(r, pairs), r.shown_head), []).append(r)
    curves = {k: sorted(v, key=lambda r: r.layers[0]) for k, v in curves.items() if len(v) > 1}
    if not curves:
        return None
    chosen = collected.choice.record if collected.choice else None
    family = _vectors(chosen, pairs) if chosen is not None and chosen.combine != "joint" else None
    title = "Probe quality by layer"
    mine = {k: v for k, v in curves.items() if k[0] == family}
    if family is not None:
        # The layer sweep is of joint vectors; pair vectors have a curve when probe.layers lists
        # several layers. Without one, the other curves stay and the choice is its own point.
        title += f": {family}, the frozen choice's vectors" if mine else f" (the frozen choice: {family})"
        curves = mine or curves
    primary = single[0].primary_metric
    figure, axis = plt.subplots(figsize=(7.5, 4))
    for (vectors, head), records in sorted(curves.items()):
        axis.errorbar([r.layers[0] for r in records], [r.metrics[primary] for r in records],
                      yerr=_ci_error(records, primary), marker="o", capsize=3, label=f"{vectors} + {head}")
    if family is not None and not mine and len(chosen.layers) == 1:
        axis.errorbar([chosen.layers[0]], [chosen.metrics[primary]], yerr=_ci_error([chosen], primary), marker="*",
                      markersize=12, capsize=3, linestyle="none",
                      label=f"{chosen.features} + {chosen.shown_head} (the frozen choice)")
    _tuned_levels(collected.main, primary, axis)
    axis.set(xlabel="layer (0 = embeddings)", ylabel=f"{primary} (95% interval)", title=title)
    _legend_outside(axis)
    return figure


def _vectors(record: Record, pairs: bool = False) -> str:
    """A probe's vectors without their layers: `mean`, or a pair combination `bi:mean`; with
    `pairs` (a text-pair task's curves side by side), the pair encoded together is `joint:mean`."""
    return record.pooling if record.combine == "joint" and not pairs else f"{record.combine}:{record.pooling}"


def _plot_heads(collected: Collected):
    """Each head's best probe and each feature set's best, the frozen choice marked, with their
    95% intervals on an axis fitted to the values (differences of a point must show), against
    the fine-tune and the baselines."""
    import matplotlib.pyplot as plt
    import numpy as np

    probes = [r for r in collected.main if r.stage == "probe" and r.protocol["name"] != "mteb"
              and not r.baseline]
    choice = collected.choice
    if not probes or choice is None:
        return None
    primary = choice.record.primary_metric
    probes = [r for r in probes if r.primary_metric == primary]
    shown = {id(choice.record): choice.record}
    for key in ({r.head for r in probes}):
        r = max([p for p in probes if p.head == key], key=selection_score)
        shown.setdefault(id(r), r)
    for key in ({_vectors(r) for r in probes}):
        r = max([p for p in probes if _vectors(p) == key], key=selection_score)
        shown.setdefault(id(r), r)
    rows = sorted(shown.values(), key=lambda r: r.metrics[primary])
    figure, axis = plt.subplots(figsize=(7.5, 0.9 + 0.32 * len(rows)))
    y = np.arange(len(rows))
    errors = _ci_error(rows, primary)
    colours = ["#d62728" if r is choice.record else "#1f77b4" for r in rows]
    axis.errorbar([r.metrics[primary] for r in rows], y, xerr=errors, fmt="none", ecolor="grey", capsize=2)
    axis.scatter([r.metrics[primary] for r in rows], y, c=colours, zorder=3, s=25)
    axis.set_yticks(y, [f"{r.features} {r.shown_head}" + ("  (the frozen choice)" if r is choice.record else "")
                        for r in rows], fontsize=7)
    levels = [r.metrics[primary] - e for r, e in zip(rows, errors[0])] + \
             [r.metrics[primary] + e for r, e in zip(rows, errors[1])]
    for record in collected.main:
        if record.stage == "finetune" and record.primary_metric == primary:
            axis.axvline(record.metrics[primary], linestyle="--", color="black", linewidth=1,
                         label=f"fine-tuned ({record.shown_head})"
                         + (", a lower bound" if record.converged is False else ""))
            levels.append(record.metrics[primary])
        elif record.baseline and record.primary_metric == primary and math.isfinite(record.metrics[primary]):
            axis.axvline(record.metrics[primary], linestyle=":" if record.baseline == "majority" else "-.",
                         color="grey", linewidth=1, label=f"baseline: {record.shown_head}")
            levels.append(record.metrics[primary])
    finite = [v for v in levels if math.isfinite(v)]
    if finite:  # the axis spans the values, not 0 to 1: a point's difference must be visible
        low, high = min(finite), max(finite)
        margin = max(0.01, 0.08 * (high - low))
        axis.set_xlim(low - margin, high + margin)
    axis.set(xlabel=f"{primary} on {choice.record.protocol['report_on']} (95% interval)",
             title="Each head's and each feature set's best probe, against fine-tuning")
    if axis.get_legend_handles_labels()[0]:
        _legend_outside(axis)
    return figure


def _plot_training(collected: Collected):
    """The fine-tune's training curve: its loss per step and each learning rate's selection score
    per epoch (not the learning curve over labelled rows: `_plot_label_curve`)."""
    import matplotlib.pyplot as plt

    tunes = [r for r in collected.main + collected.control if r.stage == "finetune" and r.curve]
    if not tunes:
        return None
    figure, loss_axis = plt.subplots(figsize=(7.5, 4))
    metric_axis = loss_axis.twinx()
    for record in tunes:
        label = f"{record.features} {record.shown_head} ({record.init})"
        steps, losses = zip(*record.curve["loss"]) if record.curve["loss"] else ((), ())
        # Markers: a short run has a few points, which a bare line would not show.
        loss_axis.plot(steps, losses, marker="." if len(steps) < 50 else None, label=f"loss, {label}")
        per_step = record.steps / max(record.epochs, 1)
        # Every learning rate the search tried, the chosen one solid: where each stopped, and why.
        for candidate in record.search or [{"params": {}, "curve": record.curve["select"]}]:
            if not candidate["curve"]:
                continue
            epochs, values = zip(*candidate["curve"])
            lr = _learning_rate(candidate)
            chosen = lr in (None, record.learning_rate)
            metric_axis.plot([e * per_step for e in epochs], values, marker="s", markersize=4,
                             linestyle="-" if chosen else ":", color="black" if chosen else "grey",
                             label=f"{record.primary_metric} per epoch (selection split)"
                                   + (f", lr {lr:g}" if lr else "") + f": {_stopped(record, candidate)}")
    loss_axis.set(xlabel="step (of the chosen learning rate)", ylabel="training loss",
                  title="Fine-tuning: training loss and the selection score per epoch")
    metric_axis.set_ylabel("selection metric")
    handles = loss_axis.get_legend_handles_labels()
    more = metric_axis.get_legend_handles_labels()
    loss_axis.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7, loc="upper center",
                     bbox_to_anchor=(0.5, -0.15), ncol=2)
    return figure


def _plot_label_curve(curve: dict | None):
    """Both sides against the labelled rows they trained on (log axis): each budget's mean with its
    interval as a band, each draw as a dot, the supported power-law fits dashed, the full split
    (the user's budget) and the measured crossover marked."""
    import matplotlib.pyplot as plt
    import numpy as np

    from featx.stats.curve import power_law

    if curve is None:
        return None
    figure, axis = plt.subplots(figsize=(7.5, 4))
    budgets = curve["budgets"]
    rows = np.array([b["rows"] for b in budgets], float)
    grid = np.geomspace(rows.min(), rows.max() * 2, 200)
    for side, color, label in (("frozen", "tab:blue", "frozen probe"), ("tuned", "tab:orange", "fine-tune")):
        values = np.array([b[side]["value"] for b in budgets])
        low = np.array([b[side]["ci"][0] for b in budgets], float)
        high = np.array([b[side]["ci"][1] for b in budgets], float)
        axis.plot(rows, values, marker="o", color=color, label=label)
        axis.fill_between(rows, low, high, color=color, alpha=0.15, linewidth=0)
        for b in budgets:
            axis.scatter([b["rows"]] * len(b[side]["per_draw"]), b[side]["per_draw"], s=8, color=color, alpha=0.5)
        fit = curve["fits"][side]
        if fit is not None and fit["supported"]:  # an unsupported fit says nothing the points do not
            axis.plot(grid, power_law(grid, fit["a"], fit["b"], fit["c"]), linestyle="--", color=color, linewidth=1,
                      label=f"{label}, fitted power law")
    axis.axvline(budgets[-1]["rows"], color="black", linewidth=1, label=f"your labels ({budgets[-1]['rows']:,} rows)")
    if curve["crossover"] is not None:
        axis.axvline(curve["crossover"]["rows"], color="tab:green", linestyle=":", linewidth=1.5,
                     label="fine-tune measurably better from here")
    axis.set_xscale("log")
    axis.set(xlabel="labelled training rows (log)", ylabel=f"{curve['metric']} on the test split",
             title="Learning curve: frozen probe and fine-tune by labelled rows")
    _legend_outside(axis)
    return figure


def _stopped(record: Record, candidate: dict) -> str:
    """Why a learning rate's curve ends, in the record's own words (featx.runs.records.stop_reason):
    the chosen one's are the record's `converged` and `stopped_by`, whatever its search entry says."""
    from featx.runs.records import stop_reason

    if _learning_rate(candidate) in (None, record.learning_rate):
        return stop_reason(record.converged, record.stopped_by)
    return stop_reason(candidate["converged"], candidate["stopped_by"])


def _learning_rate(candidate: dict) -> float | None:
    """A fine-tune search entry's learning rate; None for a run without a search."""
    return candidate["params"]["learning_rate"] if "learning_rate" in candidate["params"] else None


def _plot_cost(collected: Collected):
    """Quality against wall time: every probe pays the shared extraction pass plus its own fit;
    the fine-tune its whole search. The best frozen probe, the fine-tunes and the baselines are
    labelled."""
    import matplotlib.pyplot as plt

    # An undefined score (NaN) has no place on the axis: with none defined, no plot (a log axis
    # of no point cannot be drawn).
    records = [r for r in collected.main + collected.control if r.protocol["name"] != "mteb"
               and _cost_seconds(r) is not None and math.isfinite(r.metrics[r.primary_metric])]
    if not records:
        return None
    primary = records[0].primary_metric
    best = collected.choice.record if collected.choice else None
    figure, axis = plt.subplots(figsize=(7.5, 4))
    styles = (("probe", "pretrained", "o", "frozen + head"), ("finetune", "pretrained", "*", "fine-tuned"),
              ("probe", "random", "x", "frozen + head (random init)"),
              ("finetune", "random", "+", "fine-tuned (random init)"))
    for stage, init, marker, name in styles:
        chosen = [r for r in records if r.stage == stage and r.init == init and not r.baseline]
        if chosen:
            axis.scatter([_cost_seconds(r) for r in chosen], [r.metrics[primary] for r in chosen],
                         marker=marker, s=60, label=name)
    baselines = [r for r in records if r.baseline]
    if baselines:
        axis.scatter([_cost_seconds(r) for r in baselines], [r.metrics[primary] for r in baselines],
                     marker="v", s=50, color="grey", label="baselines (no backbone)")
    right = max(_cost_seconds(r) for r in records)
    for r in records:
        if r is best or r.stage == "finetune" or r.baseline:
            on_right = _cost_seconds(r) > right / 10  # labels of the rightmost points go to their left
            axis.annotate(f"{r.features} {r.shown_head}", (_cost_seconds(r), r.metrics[primary]),
                          textcoords="offset points", xytext=(-6 if on_right else 6, 4), fontsize=7,
                          ha="right" if on_right else "left")
    axis.set_xscale("log")
    axis.set(xlabel="wall seconds (extraction + fit; fine-tune: its whole search)", ylabel=primary,
             title="Quality against cost")
    _legend_outside(axis)
    return figure


def _cost_seconds(record: Record) -> float | None:
    if record.stage == "finetune":
        return record.wall_seconds
    fit = record.fit_seconds
    return None if fit is None else fit + (record.extract_seconds or 0.0)
