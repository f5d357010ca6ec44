"""What a report says: the verdict, one paragraph that sets the frozen choice against the best
fine-tune (and the TF-IDF baseline), ending with the command that acts on it.

`verdict` writes the paragraph's sentences from one configuration's records
(`featx.report.collected.collect`) and the numbers of `featx.report.comparisons` (the paired
bootstrap, the floor of a constant prediction). No formatting to files and no plots
(`featx.report.write`, `featx.report.plots`). docs/verdict.md states the verdict rule.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from featx.stats.bootstrap import MIN_ROWS
from featx.stats.duplicates import SAME_TEXT
from featx.runs.choice import best_tuned, selection_score
from featx.config.pipeline import Pipeline
from featx.config.load import command
from featx.runs.schema import Record, metric_text
from featx.report.collected import Collected
from featx.report.comparisons import floor_not_cleared, metric_value, paired_bootstrap
from featx.report.curve import curve_text, label_curve
from featx.report.repeats import repeats_sentence
from featx.tasks import TASKS

GOOD_ENOUGH, CLOSE = 0.98, 0.90


@dataclass
class Verdict:
    """The verdict's paragraph, the two records it sets against each other and its numbers."""
    text: str
    frozen: Record | None
    tuned: Record | None
    quality_ratio: float | None
    compute_ratio: float | None
    comparison: dict | None = None
    """The paired bootstrap of frozen against tuned (featx.stats.bootstrap.paired), if it could run."""
    lexical: dict | None = None
    """The paired bootstrap of the best frozen probe against the TF-IDF baseline."""
    label_curve: dict | None = None
    """The learning curve's numbers (featx.report.curve.label_curve), when `featx curve` ran."""


def verdict(collected: Collected, runs_dir: str | Path | None = None,
            pipeline: "Pipeline | None" = None) -> Verdict:
    """The frozen choice against the best fine-tune (pretrained backbone), in one paragraph.

    Both sides are chosen by their selection score (dev or cross-validation), never by the test
    score they report. With their predictions (`runs_dir`), the two are compared by a paired
    bootstrap over the same test rows: the difference, its 95% interval and the ratio. An
    unconverged fine-tune is a lower bound: the paragraph leads with that and with the command
    that continues it. With `pipeline`, each verdict ends with the command that acts on it."""
    judged = _verdict(collected, runs_dir, pipeline)
    curve = label_curve(collected, runs_dir, pipeline) if runs_dir is not None and judged.tuned is not None else None
    if curve is not None:  # before the closing command, which stays last
        head, mark, act = judged.text.rpartition(" Next: ")
        text = f"{head} {curve_text(curve)}{mark}{act}" if mark else f"{judged.text} {curve_text(curve)}"
        judged = dataclasses.replace(judged, text=text, label_curve=curve)
    if collected.caution:  # the printed verdict, not only the report's notes, says so first
        return dataclasses.replace(judged, text=f"{collected.caution} {judged.text}")
    return judged


def _verdict(collected: Collected, runs_dir, pipeline: "Pipeline | None") -> Verdict:
    choice = collected.choice
    if choice is None:
        return _no_choice(collected, pipeline)
    frozen = choice.record
    primary = frozen.primary_metric
    described = _frozen_text(choice)
    f = metric_value(frozen, primary)
    lexical, lexical_text = _lexical(collected, frozen, primary, runs_dir)
    # What every reading ends with: the rows that repeat another, the caveats, the lexical baseline.
    after = repeats_sentence(collected.repeats) + _caveats(collected, frozen, primary, runs_dir) + lexical_text
    tuned = best_tuned(collected.main, primary)
    if tuned is None:
        return Verdict(f"{described} reach {primary} = {_with_ci(frozen, primary)} on "
                       f"{frozen.n_eval:,} {frozen.protocol['report_on']} rows. No fine-tune record "
                       f"yet: run {_command_quoted(pipeline, 'finetune')} for the baseline this is to be "
                       "compared with."
                       f"{after}", frozen, None, None, None, None, lexical)
    t = metric_value(tuned, primary)
    if not (math.isfinite(f) and math.isfinite(t)):
        undefined = " and ".join(n for n, v in (("the frozen probe", f), ("the fine-tune", t)) if not math.isfinite(v))
        return Verdict(f"No verdict: {primary} is undefined for {undefined} (a constant prediction or "
                       "a single-class test split); see the table.", frozen, tuned, None, None)
    frozen_cost, tuned_cost = frozen.backbone_forward_passes or 0, tuned.backbone_forward_passes or 0
    compute = frozen_cost / tuned_cost if frozen_cost and tuned_cost else None
    comparison = paired_bootstrap(collected, frozen, tuned, primary, runs_dir)
    ratio = f / t if t > 0 and f >= 0 else None
    floor = floor_not_cleared(collected, tuned, primary, runs_dir)
    if floor is not None:
        text = _learned_nothing(described, frozen, tuned, floor, primary=primary, pipeline=pipeline)
        return Verdict(text + after, frozen, tuned, None, compute, comparison, lexical)
    if comparison is not None and not all(math.isfinite(v) for v in comparison["difference_ci"]):
        text = _no_interval(described, f, t, primary, comparison)
    elif tuned.converged is False:
        text = _unfinished(described, frozen, tuned, primary=primary, comparison=comparison, pipeline=pipeline)
    else:
        text = _converged(described, frozen, tuned, primary=primary, ratio=ratio, compute=compute,
                          comparison=comparison, after=after, pipeline=pipeline)
        return Verdict(text, frozen, tuned, ratio, compute, comparison, lexical)
    return Verdict(text + after, frozen, tuned, ratio, compute, comparison, lexical)


def _command_quoted(pipeline: "Pipeline | None", stage: str, *extra: str, args: tuple = ()) -> str:
    """The command that runs `stage` (with the `extra` overrides and `args`), in backticks."""
    return f"`{command(pipeline, stage, *extra, args=args)}`"


def _predict_command(pipeline: "Pipeline | None") -> str:
    """The command that predicts with the frozen choice."""
    return _command_quoted(pipeline, "predict", args=("new.csv",))


def _export_command(pipeline: "Pipeline | None") -> str:
    """The command that exports the fine-tuned model."""
    return _command_quoted(pipeline, "export", args=("exported", "--finetuned"))


def _no_choice(collected: Collected, pipeline: "Pipeline | None") -> Verdict:
    """No frozen side to judge: only the mteb check's records, or no probe at all."""
    mteb = [r for r in collected.main if r.stage == "probe" and r.protocol["name"] == "mteb"]
    if mteb:
        return Verdict(f"No verdict: the mteb protocol reproduces MTEB's classification evaluator "
                       f"({mteb[0].features}: accuracy = {_with_ci(mteb[0], 'accuracy')}), a check "
                       "against leaderboard numbers, not a frozen side to set against a fine-tune; "
                       "the verdict rests on the default protocol's probes: "
                       f"{_command_quoted(pipeline, 'probe', 'probe.protocol=auto')}.",
                       None, None, None, None)
    probes = [r for r in collected.main if r.stage == "probe" and not r.baseline]
    if probes:  # every one's selection score undefined (`frozen_choice`)
        return Verdict(f"No verdict: every frozen probe's selection score is undefined ({len(probes)} "
                       "records; a constant prediction on the selection rows, too few rows for its "
                       "head or a single class there); see the table, and give the probe more rows "
                       "(a larger dev split, or probe.protocol = \"cv\").", None, None, None, None)
    return Verdict(f"No probe records yet: run {_command_quoted(pipeline, 'probe')} to train heads on the "
                   "cache.", None, None, None, None)


def _converged(described: str, frozen: Record, tuned: Record, *, primary: str, ratio, compute, comparison,
               after: str, pipeline: "Pipeline | None") -> str:
    """The verdict against a converged fine-tune: the ratio (or difference), the compute, the
    paired interval, the reading (`after` it, the lexical baseline's), then the command that acts."""
    f, t = metric_value(frozen, primary), metric_value(tuned, primary)
    frozen_cost, tuned_cost = frozen.backbone_forward_passes or 0, tuned.backbone_forward_passes or 0
    cost_text = (f" for {_fraction(compute)} of the compute ({frozen_cost:,} vs {tuned_cost:,} backbone "
                 "forward-pass equivalents: one extraction pass against the fine-tune's whole "
                 "learning-rate search, training steps at ~3 forwards each plus evaluation)") if compute else ""
    if ratio is not None:
        head = f"{described} reach {ratio:.1%} of the fine-tuned {primary} ({f:.4f} vs {t:.4f}){cost_text}."
    else:  # a ratio of a negative or zero score means nothing; give the difference
        head = (f"{described}: {primary} {f:.4f} against {t:.4f} fine-tuned (difference "
                f"{f - t:+.4f}){cost_text}.")
    reading, act = _reading(ratio, f, t, comparison)
    next_step = {"frozen": f" Next: predict with the frozen choice, {_predict_command(pipeline)}.",
                 "tuned": f" Next: use the fine-tuned model, {_export_command(pipeline)}.",
                 "both": f" Next: iterate with the frozen choice, {_predict_command(pipeline)}; "
                         f"for the last points, {_export_command(pipeline)}."}.get(act, "")
    return f"{head}{_comparison_text(comparison, tuned)}{_wall(frozen, tuned)} {reading}{after}{next_step}"


def _frozen_text(choice) -> str:
    """"Frozen features (mean, layer 5, mlp; chosen on dev ...)", with how the choice was made."""
    frozen = choice.record
    layers = f"layer{'s' if len(frozen.layers) > 1 else ''} {'+'.join(map(str, frozen.layers))}"
    vectors = {"bi": f"[u, v, |u - v|, u * v] of the two texts' {frozen.pooling} vectors",
               "cos": f"the cosine of the two texts' {frozen.pooling} vectors"}.get(frozen.combine, frozen.pooling)
    head = "no training" if frozen.head == "identity" else frozen.shown_head
    rule = ""
    if choice.record is not choice.top and choice.paired:
        rule = (f", the simplest of the {choice.within} configurations that {frozen.protocol['select_on']} "
                f"cannot tell apart from the best selection score, {selection_score(choice.top):.4f} "
                f"({choice.top.features} {choice.top.shown_head}): "
                f"{selection_score(choice.top) - selection_score(frozen):.4f} "
                f"below it, within one standard error of the paired difference ({choice.se:.4f})")
    elif choice.record is not choice.top:
        rule = (f", the simplest of the {choice.within} configurations within one standard error "
                f"({choice.se:.4f}) of the best selection score, {selection_score(choice.top):.4f} "
                f"({choice.top.features} {choice.top.shown_head})")
    return f"Frozen features ({vectors}, {layers}, {head}; chosen on {frozen.protocol['select_on']}{rule})"


def _unfinished(described: str, frozen: Record, tuned: Record, *, primary: str, comparison,
                pipeline: "Pipeline | None") -> str:
    """The verdict against a fine-tune a cap stopped while it was still improving: that comes
    first, with the command that continues it; no ratio headline against it."""
    cap = (f"its epoch cap (finetune.max_epochs = {tuned.epochs})" if tuned.stopped_by == "max_epochs"
           else "its wall-time cap (finetune.max_seconds)" if tuned.stopped_by == "budget"
           else f"{tuned.stopped_by}")
    go_on = (f"`{tuned.continue_with}`" if tuned.continue_with
             else _command_quoted(pipeline, "finetune", f"finetune.max_epochs={2 * max(tuned.epochs or 1, 1)}"))
    text = (f"The fine-tune did not converge: {cap} stopped it after {tuned.epochs} epochs while its "
            f"{primary} on {tuned.protocol['select_on']} was still rising, so its {primary} "
            f"({_with_ci(tuned, primary)}) is only a lower bound; continue it with {go_on} (it resumes "
            f"from its last epoch). So far, {described[0].lower() + described[1:]} score "
            f"{metric_value(frozen, primary):.4f} against it")
    if comparison is None:
        return text + ("; no interval: the records' predictions are missing or not on the same rows. "
                       "Whether fine-tuning pays is not settled until it converges.")
    low, high = comparison["difference_ci"]
    text += (f" (paired bootstrap over the same {_rows(comparison)}: difference "
             f"{comparison['difference']:+.4f}, 95% interval [{low:+.4f}, {high:+.4f}]).")
    if low > 0:
        return text + (" Frozen features lead the unfinished fine-tune, which does not show that "
                       "fine-tuning cannot do better: that is settled only once it converges.")
    if high < 0:
        return text + " Even unfinished, the fine-tune is measurably better: fine-tuning pays on this task."
    return text + " No measurable difference so far; the finished fine-tune may still pull ahead."


def _baseline_name(floor: dict) -> str:
    return "predicting the training mean" if floor.get("correlation") or floor.get("regression") \
        else "predicting the majority class"


def _floor_text(record: Record, floor: dict, primary: str) -> str:
    if floor.get("squared"):
        mse, mean = floor["squared"]
        return (f"{primary} {_with_ci(record, primary)}, but a squared error of {metric_text(mse)} against "
                f"the training mean's {metric_text(mean)}: its predictions follow the targets' order "
                "without their scale, as a near-constant prediction does")
    if floor.get("correlation"):
        return (f"{primary} {_with_ci(record, primary)}, its interval reaching 0, the {primary} of any "
                "constant prediction" if metric_value(record, primary) > 0 else
                f"{primary} {_with_ci(record, primary)}, against 0 for any constant prediction")
    comparison = floor["comparison"]
    interval = ""
    if comparison is not None and all(math.isfinite(v) for v in comparison["difference_ci"]):
        low, high = comparison["difference_ci"]
        interval = f"; paired difference {comparison['difference']:+.4f}, 95% interval [{low:+.4f}, {high:+.4f}]"
    baseline = "the training mean's" if floor.get("regression") else "the majority baseline's"
    return (f"{primary} {metric_text(metric_value(record, primary))} against {baseline} "
            f"{metric_text(floor['value'])}{interval}")


def _learned_nothing(described: str, frozen: Record, tuned: Record, floor: dict, *, primary: str,
                     pipeline: "Pipeline | None") -> str:
    """The verdict when the fine-tune is no better than predicting the majority class: it is no
    baseline, so no ratio against it and no "frozen features beat it". The advice follows from
    how the run stopped (`_what_went_wrong`)."""
    collapsed = "one class" if TASKS[tuned.task].classes and not floor.get("correlation") else "a constant"
    reason, rerun = _what_went_wrong(tuned, collapsed, pipeline)
    return (f"No verdict against the fine-tune: it is not measurably better than {_baseline_name(floor)} "
            f"({_floor_text(tuned, floor, primary)}): it learned nothing this {tuned.protocol['report_on']} "
            f"split can see ({reason}), so it is no baseline to judge frozen features by. {rerun} "
            f"Meanwhile, {described[0].lower() + described[1:]} reach {primary} = "
            f"{_with_ci(frozen, primary)} on {frozen.n_eval:,} {frozen.protocol['report_on']} rows.")


# The learning rates a rerun may take (within the range a pretrained backbone keeps).
RERUN_RATES = (1e-5, 2e-5, 3e-5, 5e-5, 1e-4)


def _what_went_wrong(tuned: Record, collapsed: str, pipeline: "Pipeline | None") -> tuple[str, str]:
    """(why a fine-tune learned nothing, the rerun that addresses it). A run a cap stopped while
    still improving had too few epochs: its own command continues it (a larger cap in the same
    run). Otherwise it converged on nothing, collapsed or at a learning rate that did not suit:
    the rerun takes the rates of RERUN_RATES it has not tried, on both sides of those it did
    (the epoch cap is not part of a finished run's identity: a larger one alone retrains
    nothing)."""
    if tuned.converged is False and tuned.continue_with:
        return ("a cap stopped it while it was still improving: too few epochs",
                f"Continue it with `{tuned.continue_with}`.")
    tried = {float(r) for r in tuned.hyperparameters["learning_rates"] if r is not None}
    others = [r for r in RERUN_RATES if r not in tried] or [RERUN_RATES[0]]
    return (f"a run collapsed to {collapsed}, or learning rates that did not suit",
            "Rerun it with other learning rates, e.g. "
            f"{_command_quoted(pipeline, 'finetune', 'finetune.learning_rates=' + str(others).replace(' ', ''))}.")


def _overlap_note(frozen: Record) -> str:
    """A sentence when rows of the split the verdict reports on have a text train holds too
    (the same text up to case, Unicode form, format characters and spacing:
    `featx.stats.duplicates.text_key`; the pair, for pairs): every score there rewards
    memorising, TF-IDF's most of all."""
    split = frozen.protocol["report_on"]
    in_train = frozen.extraction["in_train"] or {}
    shared = in_train[split] if split in in_train else 0
    if not shared or not frozen.n_eval:
        return ""
    return (f" {shared:,} of the {frozen.n_eval:,} {split} rows ({shared / frozen.n_eval:.0%}) have a text "
            f"that train holds too ({SAME_TEXT}): scores on them "
            "reward memorising the training rows, TF-IDF's most of all; for a fair comparison, "
            f"`data.drop_in_train = true` drops them from the {split} split (a new extraction).")


def _positive_note(frozen: Record, primary: str) -> str:
    """Binary f1 is one class's F1: which one, and a warning when it is the common class (the
    F1 of a class of 96% of the rows is 0.98 for predicting it everywhere)."""
    labels = frozen.labels or {}
    if primary != "f1" or "positive" not in labels:
        return ""
    share = labels["positive_report"] if "positive_report" in labels else None
    text = (f" f1 is the F1 of the positive class {labels['positive']!r} (the second of the two labels; "
            "data.label_names orders them)")
    if isinstance(share, (int, float)) and share > 0.5:
        names = json.dumps([labels["positive"], labels["negative"]], ensure_ascii=False)
        return text + (f", the common one ({share:.0%} of the {frozen.protocol['report_on']} rows): predicting it "
                       f"everywhere scores well; for the rare class {labels['negative']!r}, set data.label_names = "
                       f"{names}, or use probe.metric = \"mcc\".")
    return text + "."


def _caveats(collected: Collected, frozen: Record, primary: str, runs_dir) -> str:
    """A sentence when the frozen choice itself is not measurably above the majority baseline,
    then one when the reported rows share texts with train (`_overlap_note`)."""
    floor = floor_not_cleared(collected, frozen, primary, runs_dir)
    if floor is None:
        return _overlap_note(frozen) + _positive_note(frozen, primary)
    return (f" The frozen choice is not measurably better than {_baseline_name(floor)} "
            f"({_floor_text(frozen, floor, primary)}): these features carry nothing this "
            f"{frozen.protocol['report_on']} split can see for this task."
            + _overlap_note(frozen) + _positive_note(frozen, primary))


def _no_interval(described: str, f: float, t: float, primary: str, comparison: dict) -> str:
    """No verdict when the paired bootstrap gives no interval: a score difference on a handful of
    rows (or on resamples where the metric is mostly undefined) reads as a result and is not."""
    distinct = "distinct " if "distinct" in comparison else ""
    return (f"No verdict: {described[0].lower() + described[1:]} score {primary} = {f:.4f} against "
            f"{t:.4f} fine-tuned, but on {_rows(comparison)} the paired bootstrap gives no interval (it "
            f"needs at least {MIN_ROWS} {distinct}rows, and {primary} defined on "
            "90% of the resamples), so this test split cannot tell the two apart. Give it more rows "
            "(a larger test file, or data.test_fraction).")


def _rows(comparison: dict, named: bool = True) -> str:
    """The rows a paired comparison resampled: "200 test rows", "200 test rows (20 distinct)"
    (without the split's name unless `named`)."""
    distinct = f" ({comparison['distinct']:,} distinct)" if "distinct" in comparison else ""
    return f"{comparison['n']:,} {comparison['split'] + ' ' if named else ''}rows{distinct}"


def _comparison_text(comparison: dict | None, tuned: Record) -> str:
    if comparison is None:
        return (f" No interval: the records' predictions are missing or not on the same rows "
                f"({tuned.n_eval} test rows); rerun the probe and the fine-tune.")
    low, high = comparison["difference_ci"]
    text = (f" Paired bootstrap over the same {_rows(comparison)}: difference "
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
        if f >= t:
            return "Frozen features are good enough here.", "frozen"
        return "Fine-tuning pays on this task.", "tuned"
    if ratio >= GOOD_ENOUGH:
        return "Frozen features are good enough here.", "frozen"
    if ratio >= CLOSE:
        return "Frozen features come close: use them to iterate, fine-tune for the last points.", "both"
    return "Fine-tuning pays on this task.", "tuned"


def _lexical(collected: Collected, frozen: Record, primary: str, runs_dir) -> tuple[dict | None, str]:
    """Whether the backbone adds anything over TF-IDF: the frozen choice against the lexical
    baseline, paired on the same rows."""
    lexical = [r for r in collected.main if r.baseline == "lexical" and r.primary_metric == primary]
    if not lexical:
        return None, ""
    baseline = max(lexical, key=selection_score)
    comparison = paired_bootstrap(collected, frozen, baseline, primary, runs_dir)
    value = _with_ci(baseline, primary)
    if comparison is None:
        return None, f" The TF-IDF baseline reaches {primary} = {value}."
    low, high = comparison["difference_ci"]
    if not (math.isfinite(low) and math.isfinite(high)):
        return comparison, (f" The TF-IDF baseline reaches {primary} = {value}; on "
                            f"{_rows(comparison, named=False)} there is no paired interval to compare it by.")
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


def _with_ci(record: Record, metric: str) -> str:
    """The record's `metric` with its interval; "undefined" where the rows cannot define it."""
    value = metric_value(record, metric)
    if math.isnan(value):
        return "undefined"
    ci = record.metrics_ci[metric]
    if ci and all(v is not None and math.isfinite(v) for v in ci):
        return f"{metric_text(value)} [{metric_text(ci[0])}, {metric_text(ci[1])}]"
    return metric_text(value)


def _fraction(ratio: float) -> str:
    """The frozen side's cost as a share of the fine-tune's: "1/6"; a percentage where a whole
    denominator is more than 5% off (0.77 would round to "1/1", 0.6 to "1/2"); "1.3x" past it."""
    if ratio >= 1:
        return f"{ratio:.1f}x"
    whole = round(1 / ratio)
    return f"1/{whole}" if abs(1 / whole - ratio) <= 0.05 * ratio else f"{ratio:.0%}"


def _wall(frozen: Record, tuned: Record) -> str:
    extract, fit, train = frozen.extract_seconds, frozen.fit_seconds, tuned.wall_seconds
    if extract is None or fit is None or train is None:
        return ""
    return (f" Wall time: {extract:.0f} s extraction + {fit:.1f} s head fit, against {train:.0f} s "
            "of fine-tuning.")
