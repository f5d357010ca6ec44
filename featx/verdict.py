"""What a report says: the records of one configuration, their table rows, and the verdict.

`collect` picks the records of one configuration of a pipeline (never a mix of two) and the
frozen choice; `verdict` sets the frozen choice against
the best fine-tune (and the TF-IDF baseline) in one paragraph, with a paired bootstrap on their
stored predictions. No formatting to files and no plots (`featx.report`, `featx.plots`).
docs/verdict.md states the verdict rule.
"""
from __future__ import annotations

import dataclasses
import json
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx.bootstrap import MIN_ROWS
from featx.choice import FrozenChoice, best_tuned, frozen_choice, selection_score
from featx.config import Pipeline
from featx.configfile import command
from featx.errors import FeatxError
from featx.recordschema import Record, metric_text
from featx.records import current_records, pipeline_records
from featx.tasks import TASKS

GOOD_ENOUGH, CLOSE = 0.98, 0.90


@dataclass
class Inputs:
    pipeline: str
    main: list[Record]
    """Records of the configuration reported, on its cache: probes and fine-tunes."""
    control: list[Record]
    """Records of the same configuration on the random-init control's cache, if any."""
    notes: list[str] = dataclasses.field(default_factory=list)
    """What is incomplete (an interrupted probe) or uncertain (no cache to check the records by)."""
    others: list[str] = dataclasses.field(default_factory=list)
    """The pipeline's other configurations with records, each with the command that reports it."""
    current: "Pipeline | None" = None
    """The pipeline as configured for this report (None: a library call on records alone)."""
    choice: "FrozenChoice | None" = None
    """The verdict's frozen configuration (`choice.frozen_choice` on `main`), chosen once so the
    verdict, the plots and the notes name the same one."""
    caution: str | None = None
    """Why every number may describe other data (the pipeline as it is now has no cache): the
    verdict leads with it."""


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
    everything = pipeline_records(runs_dir, pipeline)
    older = [d.name for d in sorted(root.glob("*")) if (d / "probe").is_dir() or (d / "finetune").is_dir()]
    legacy = (f" (the records under {root}/{older[0]}/probe and /finetune are in an earlier featx's "
              "layout, which this one does not read: rerun the stages)") if older else ""
    if not everything:
        raise FeatxError(f"no run records for pipeline {pipeline!r} under {runs_dir}{legacy}: run "
                         f"`{command(current, 'probe')}` (`{make_command(current, 'probe')}`), and "
                         "the fine-tune, first")
    if current is None:
        main, control = _newest(everything)
        return Inputs(pipeline, main, control, notes=[], choice=frozen_choice(main, runs_dir))
    main, control, notes, caution = _current(runs_dir, everything, current)
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
    return Inputs(pipeline, main, control, notes, others, current, frozen_choice(main, runs_dir), caution)


def _brief(pipeline: "Pipeline") -> str:
    return (f"model {pipeline.model.name}, init {pipeline.model.init}, probe protocol "
            f"{pipeline.probe.protocol}, grid {pipeline.probe.grid}")


def _newest(everything: list[Record]) -> tuple[list[Record], list[Record]]:
    """(main, control) without a pipeline: on the newest pretrained (and random-init) cache, the
    records of its newest probe configuration and of its newest fine-tune."""
    def pick(init: str) -> list[Record]:
        records = _newest_cache([r for r in everything if r.init == init])
        chosen = []
        for stage, field in (("probe", "config_hash"), ("finetune", "run_hash")):
            staged = [r for r in records if r.stage == stage]
            if staged:
                newest = getattr(max(staged, key=lambda r: r.created), field)
                chosen += [r for r in staged if getattr(r, field) == newest]
        return chosen
    return pick("pretrained"), pick("random")


def _current(runs_dir, everything: list[Record], current: "Pipeline") -> tuple[list[Record], list[Record], list[str], str | None]:
    """(main, control, notes, caution) of the pipeline as configured: its records on its cache;
    when it has no cache, on the newest cache of the same settings, said first (the caution)."""
    from featx.plan import find_cache, last_cache_key
    from featx.records import probe_config_hash, probe_dir

    mine = current_records(current, everything)
    notes, caution = [], None
    try:
        main = [r for r in current_records(current, mine, find_cache(current).stem) if r.init == current.model.init]
    except FeatxError as exc:
        # No cache for the pipeline as it is now: the cache its extraction wrote last, if its
        # records are of these model and extraction settings, else the newest of all these settings.
        last = last_cache_key(current)
        main = [r for r in mine if r.cache_key[:16] == last and r.init == current.model.init
                and _same_cache_settings(r, current, current.model.init, sections=("model", "extract"))]
        main = main or _newest_cache([r for r in mine if r.init == current.model.init
                                      and _same_cache_settings(r, current, current.model.init)])
        if main:
            said = textwrap.shorten(str(exc), 320, placeholder=" ...")
            caution = (f"The pipeline as it is now has no cache ({said}): if a data or model file "
                       "changed since these records were made, they describe other data; rerun `featx "
                       "extract`, `featx probe` and `featx finetune` before trusting this report.")
    control = []
    if main and current.model.init == "pretrained":
        fingerprint = _fingerprint(main[0])
        control = _newest_cache([r for r in mine if r.init == "random" and _same_cache_settings(r, current, "random")
                                 and _fingerprint(r) == fingerprint])
    for records in (main, control):
        if records:
            folder = probe_dir(runs_dir, current.name, records[0].cache_key, probe_config_hash(current.probe))
            notes += _interrupted(folder, current, len([r for r in records if r.stage == "probe"]))
    return main, control, notes, caution


def _fingerprint(record: Record) -> str | None:
    """The backbone files' fingerprint a record was made from (None in a record of an older featx)."""
    return record.backbone["fingerprint"] if record.backbone else None


def _same_cache_settings(record: Record, pipeline: "Pipeline", init: str,
                         sections: tuple[str, ...] = ("data", "model", "extract")) -> bool:
    """Whether a record was made on a cache of the pipeline's data, model (with `init`) and
    extraction settings (those of `sections`), as its `configuration` says."""
    from featx.records import configuration

    recorded = record.configuration
    if not isinstance(recorded, dict):
        return False
    now = configuration(pipeline)
    now["model"]["init"] = init
    return all(recorded.get(section) == now[section] for section in sections)


def _newest_cache(records: list[Record]) -> list[Record]:
    if not records:
        return []
    key = max(records, key=lambda r: r.created).cache_key
    return [r for r in records if r.cache_key == key]


def _interrupted(directory: Path, pipeline: "Pipeline", found: int) -> list[str]:
    from featx.records import probe_config_hash, probe_interrupted

    run = probe_interrupted(directory, probe_config_hash(pipeline.probe))
    if run is None:
        return []
    return [f"The probe run was interrupted: {found} of its {run.get('planned')} fits have records; rerun "
            f"`{command(pipeline, 'probe')}` to finish it (finished fits are redone, not lost)."]


# ---------------------------------------------------------------------------------------------
# The verdict


@dataclass
class Verdict:
    text: str
    frozen: Record | None
    tuned: Record | None
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
    judged = _verdict(inputs, runs_dir, pipeline)
    if inputs.caution:  # the printed verdict, not only the report's notes, says so first
        return dataclasses.replace(judged, text=f"{inputs.caution} {judged.text}")
    return judged


def _verdict(inputs: Inputs, runs_dir, pipeline) -> Verdict:
    choice = inputs.choice
    run = lambda stage, *extra, args=(): f"`{command(pipeline, stage, *extra, args=args)}`"  # noqa: E731
    if choice is None:
        return _no_choice(inputs, run)
    frozen = choice.record
    primary = frozen.primary_metric
    described = _frozen_text(choice)
    f = _value(frozen, primary)
    lexical, lexical_text = _lexical(inputs, frozen, primary, runs_dir)
    after = _caveats(inputs, frozen, primary, runs_dir) + lexical_text  # what every reading ends with
    tuned = best_tuned(inputs.main, primary)
    if tuned is None:
        return Verdict(f"{described} reach {primary} = {_with_ci(frozen, primary)} on "
                       f"{frozen.n_eval:,} {frozen.protocol['report_on']} rows. No fine-tune record "
                       f"yet: run {run('finetune')} for the baseline this is to be compared with."
                       f"{after}", frozen, None, None, None, None, lexical)
    t = _value(tuned, primary)
    if not (math.isfinite(f) and math.isfinite(t)):
        undefined = " and ".join(n for n, v in (("the frozen probe", f), ("the fine-tune", t)) if not math.isfinite(v))
        return Verdict(f"No verdict: {primary} is undefined for {undefined} (a constant prediction or "
                       "a single-class test split); see the table.", frozen, tuned, None, None)
    frozen_cost, tuned_cost = frozen.backbone_forward_passes or 0, tuned.backbone_forward_passes or 0
    compute = frozen_cost / tuned_cost if frozen_cost and tuned_cost else None
    comparison = _paired(inputs, frozen, tuned, primary, runs_dir)
    ratio = f / t if t > 0 and f >= 0 else None
    floor = _floor(inputs, tuned, primary, runs_dir)
    if floor is not None:
        return Verdict(_learned_nothing(described, frozen, tuned, floor, primary=primary, run=run) + after,
                       frozen, tuned, None, compute, comparison, lexical)
    if comparison is not None and not all(math.isfinite(v) for v in comparison["difference_ci"]):
        text = _no_interval(described, f, t, primary, comparison)
    elif tuned.converged is False:
        text = _unfinished(described, frozen, tuned, primary=primary, comparison=comparison, run=run)
    else:
        text = _converged(described, frozen, tuned, primary=primary, ratio=ratio, compute=compute,
                          comparison=comparison, after=after, run=run)
        return Verdict(text, frozen, tuned, ratio, compute, comparison, lexical)
    return Verdict(text + after, frozen, tuned, ratio, compute, comparison, lexical)


def _no_choice(inputs: Inputs, run) -> Verdict:
    """No frozen side to judge: only the mteb check's records, or no probe at all."""
    mteb = [r for r in inputs.main if r.stage == "probe" and r.protocol["name"] == "mteb"]
    if mteb:
        return Verdict(f"No verdict: the mteb protocol reproduces MTEB's classification evaluator "
                       f"({mteb[0].features}: accuracy = {_with_ci(mteb[0], 'accuracy')}), a check "
                       "against leaderboard numbers, not a frozen side to set against a fine-tune; "
                       f"the verdict rests on the default protocol's probes: {run('probe', 'probe.protocol=auto')}.",
                       None, None, None, None)
    probes = [r for r in inputs.main if r.stage == "probe" and not r.baseline]
    if probes:  # every one's selection score undefined (`frozen_choice`)
        return Verdict(f"No verdict: every frozen probe's selection score is undefined ({len(probes)} "
                       "records; a constant prediction on the selection rows, too few rows for its "
                       "head or a single class there); see the table, and give the probe more rows "
                       "(a larger dev split, or probe.protocol = \"cv\").", None, None, None, None)
    return Verdict(f"No probe records yet: run {run('probe')} to train heads on the cache.",
                   None, None, None, None)


def _converged(described: str, frozen: Record, tuned: Record, *, primary: str, ratio, compute, comparison,
               after: str, run) -> str:
    """The verdict against a converged fine-tune: the ratio (or difference), the compute, the
    paired interval, the reading (`after` it, the lexical baseline's), then the command that acts."""
    f, t = _value(frozen, primary), _value(tuned, primary)
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
    next_step = {"frozen": f" Next: predict with the frozen choice, {run('predict', args=('new.csv',))}.",
                 "tuned": " Next: use the fine-tuned model, "
                          f"{run('export', args=('exported', '--finetuned'))}.",
                 "both": f" Next: iterate with the frozen choice, {run('predict', args=('new.csv',))}; "
                         f"for the last points, {run('export', args=('exported', '--finetuned'))}."}.get(act, "")
    return f"{head}{_comparison_text(comparison, tuned)}{_wall(frozen, tuned)} {reading}{after}{next_step}"


def _frozen_text(choice) -> str:
    """"Frozen features (mean, layer 5, mlp; chosen on dev ...)", with how the choice was made."""
    frozen = choice.record
    layers = f"layer{'s' if len(frozen.layers) > 1 else ''} {'+'.join(map(str, frozen.layers))}"
    vectors = {"bi": f"[u, v, |u - v|, u * v] of the two texts' {frozen.pooling} vectors",
               "cos": f"the cosine of the two texts' {frozen.pooling} vectors"}.get(frozen.combine, frozen.pooling)
    head = "no training" if frozen.head == "identity" else frozen.head
    rule = ""
    if choice.record is not choice.top and choice.paired:
        rule = (f", the simplest of the {choice.within} configurations that {frozen.protocol['select_on']} "
                f"cannot tell apart from the best selection score, {selection_score(choice.top):.4f} "
                f"({choice.top.features} {choice.top.head}): {selection_score(choice.top) - selection_score(frozen):.4f} "
                f"below it, within one standard error of the paired difference ({choice.se:.4f})")
    elif choice.record is not choice.top:
        rule = (f", the simplest of the {choice.within} configurations within one standard error "
                f"({choice.se:.4f}) of the best selection score, {selection_score(choice.top):.4f} "
                f"({choice.top.features} {choice.top.head})")
    return f"Frozen features ({vectors}, {layers}, {head}; chosen on {frozen.protocol['select_on']}{rule})"


def _unfinished(described: str, frozen: Record, tuned: Record, *, primary: str, comparison, run) -> str:
    """The verdict against a fine-tune a cap stopped while it was still improving: that comes
    first, with the command that continues it; no ratio headline against it."""
    cap = (f"its epoch cap (finetune.max_epochs = {tuned.epochs})" if tuned.stopped_by == "max_epochs"
           else "its wall-time cap (finetune.max_seconds)" if tuned.stopped_by == "budget"
           else f"{tuned.stopped_by}")
    go_on = (f"`{tuned.continue_with}`" if tuned.continue_with
             else run("finetune", "finetune.max_epochs=" + str(2 * max(tuned.epochs or 1, 1))))
    text = (f"The fine-tune did not converge: {cap} stopped it after {tuned.epochs} epochs while its "
            f"{primary} on {tuned.protocol['select_on']} was still rising, so its {primary} "
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


def _floor(inputs: Inputs, record: Record, primary: str, runs_dir) -> dict | None:
    """The majority baseline's score and the comparison with it, when `record` is not measurably
    above it: no higher on the point value, or a paired interval of the gain reaching 0. None
    when it is above it, or when there is no majority record with a defined score to compare.
    A fine-tune collapsed to one class (its loss flat at ln K: a known failure of BERT on small
    data, or a learning rate that did not suit) reads as a baseline otherwise, and frozen
    features "beat" it."""
    majority = [r for r in inputs.main if r.baseline == "majority" and r.primary_metric == primary]
    value = _value(record, primary)
    if primary in CORRELATIONS and (not majority or not math.isfinite(_value(majority[0], primary))):
        # A constant prediction (the training mean) has no correlation: its floor is 0, and a
        # score is above it when its own interval is. Skipped, random targets read "no
        # measurable difference: frozen features are as good" at Pearson -0.05.
        ci = record.metrics_ci.get(primary)
        low = ci[0] if ci and ci[0] is not None and math.isfinite(ci[0]) else None
        if value > 0 and (low is None or low > 0):
            return _squared_floor(inputs, record, majority, runs_dir)
        return {"correlation": True}
    if not majority or not math.isfinite(m := _value(majority[0], primary)):
        return None
    comparison = _paired(inputs, record, majority[0], primary, runs_dir)
    if value > m and (comparison is None or not all(math.isfinite(v) for v in comparison["difference_ci"])
                      or comparison["difference_ci"][0] > 0):
        return None
    return {"value": m, "comparison": comparison, "regression": TASKS[record.task].regression}


def _squared_floor(inputs: Inputs, record: Record, majority: list[Record], runs_dir) -> dict | None:
    """A correlation above 0 from predictions not measurably closer to the targets than the
    training mean's: a fine-tune whose loss stayed flat predicted the mean to within 1e-3 of the
    targets' spread, correlated 0.89 with them, and read as a baseline frozen features reached
    96% of. Pearson ignores the scale; the squared error does not. Predictions r-correlated
    with the targets and fitted to their scale remove about r^2 of the mean's squared error
    (1 - r^2 left); these removed 0.0004 of it at r = 0.89, which a paired bootstrap still
    finds measurable on enough rows. So the gain must be measurable (the paired bootstrap of
    the two squared errors, where the predictions are there to pair) and at least a tenth of
    r^2: a prediction shrunk to under about 5% of its fitted scale fails it."""
    if record.head == "identity":  # the no-training cosine row: on its own scale, judged by order alone
        return None
    metrics = record.metrics or {}
    mse, mean, r = metrics.get("mse"), (majority[0].metrics or {}).get("mse") if majority else None, \
        metrics.get("pearson")
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (mse, mean, r)) or mean <= 0:
        return None
    comparison = _paired(inputs, record, majority[0], "mse", runs_dir)
    high = comparison["difference_ci"][1] if comparison is not None else None
    measurable = high < 0 if high is not None and math.isfinite(high) else mse < mean
    if measurable and 1 - mse / mean >= MIN_SQUARED_GAIN * r * r:
        return None
    return {"correlation": True, "squared": (mse, mean)}


# The least share of what its correlation explains (r^2 of the mean's squared error) that a
# prediction must remove to be read as predicting the targets (`_squared_floor`).
MIN_SQUARED_GAIN = 0.1


# Metrics a constant prediction leaves undefined, whose floor is 0.
CORRELATIONS = frozenset({"pearson", "spearman"})


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
                "constant prediction" if _value(record, primary) > 0 else
                f"{primary} {_with_ci(record, primary)}, against 0 for any constant prediction")
    comparison = floor["comparison"]
    interval = ""
    if comparison is not None and all(math.isfinite(v) for v in comparison["difference_ci"]):
        low, high = comparison["difference_ci"]
        interval = f"; paired difference {comparison['difference']:+.4f}, 95% interval [{low:+.4f}, {high:+.4f}]"
    baseline = "the training mean's" if floor.get("regression") else "the majority baseline's"
    return f"{primary} {metric_text(_value(record, primary))} against {baseline} {metric_text(floor['value'])}{interval}"


def _learned_nothing(described: str, frozen: Record, tuned: Record, floor: dict, *, primary: str, run) -> str:
    """The verdict when the fine-tune is no better than predicting the majority class: it is no
    baseline, so no ratio against it and no "frozen features beat it"."""
    rates = (tuned.hyperparameters or {}).get("learning_rates") or [(tuned.hyperparameters or {}).get("learning_rate")]
    others = sorted({2e-5, 3e-5, 5e-5} - {float(r) for r in rates if r is not None}) or [1e-5]
    return (f"No verdict against the fine-tune: it is not measurably better than {_baseline_name(floor)} "
            f"({_floor_text(tuned, floor, primary)}): it learned nothing this "
            f"{tuned.protocol.get('report_on', 'test')} split can see (a run collapsed to "
            f"{'a constant' if floor.get('correlation') or floor.get('regression') else 'one class'}, "
            "too few epochs, or learning rates that did "
            "not suit), so it is no baseline to judge frozen features by. Rerun it with other "
            f"learning rates or more epochs, e.g. {run('finetune', 'finetune.learning_rates=' + str(others).replace(' ', ''))}. "
            f"Meanwhile, {described[0].lower() + described[1:]} reach {primary} = "
            f"{_with_ci(frozen, primary)} on {frozen.n_eval:,} {frozen.protocol['report_on']} rows.")


def _overlap_note(frozen: Record) -> str:
    """A sentence when rows of the split the verdict reports on have a text train holds too
    (the same text up to case and surrounding spaces; the pair, for pairs): every score there
    rewards memorising, TF-IDF's most of all."""
    split = frozen.protocol.get("report_on")
    shared = ((frozen.extraction or {}).get("in_train") or {}).get(split)
    if not shared or not frozen.n_eval:
        return ""
    return (f" {shared:,} of the {frozen.n_eval:,} {split} rows ({shared / frozen.n_eval:.0%}) have a text "
            "that train holds too (the same text up to case and surrounding spaces): scores on them "
            "reward memorising the training rows, TF-IDF's most of all; remove them from the "
            f"{split} split for a fair comparison.")


def _positive_note(frozen: Record, primary: str) -> str:
    """Binary f1 is one class's F1: which one, and a warning when it is the common class (the
    F1 of a class of 96% of the rows is 0.98 for predicting it everywhere)."""
    labels = frozen.labels or {}
    if primary != "f1" or "positive" not in labels:
        return ""
    share = labels.get("positive_report")
    text = (f" f1 is the F1 of the positive class {labels['positive']!r} (the second of the two labels; "
            "data.label_names orders them)")
    if isinstance(share, (int, float)) and share > 0.5:
        names = json.dumps([labels["positive"], labels["negative"]], ensure_ascii=False)
        return text + (f", the common one ({share:.0%} of the {frozen.protocol['report_on']} rows): predicting it "
                       f"everywhere scores well; for the rare class {labels['negative']!r}, set data.label_names = "
                       f"{names}, or use probe.metric = \"mcc\".")
    return text + "."


def _caveats(inputs: Inputs, frozen: Record, primary: str, runs_dir) -> str:
    """A sentence when the frozen choice itself is not measurably above the majority baseline,
    then one when the reported rows share texts with train (`_overlap_note`)."""
    floor = _floor(inputs, frozen, primary, runs_dir)
    if floor is None:
        return _overlap_note(frozen) + _positive_note(frozen, primary)
    return (f" The frozen choice is not measurably better than {_baseline_name(floor)} "
            f"({_floor_text(frozen, floor, primary)}): these features carry nothing this "
            f"{frozen.protocol.get('report_on', 'test')} split can see for this task." + _overlap_note(frozen) + _positive_note(frozen, primary))


def _no_interval(described: str, f: float, t: float, primary: str, comparison: dict) -> str:
    """No verdict when the paired bootstrap gives no interval: a score difference on a handful of
    rows (or on resamples where the metric is mostly undefined) reads as a result and is not."""
    return (f"No verdict: {described[0].lower() + described[1:]} score {primary} = {f:.4f} against "
            f"{t:.4f} fine-tuned, but on {comparison['n']:,} {comparison['split']} rows the paired "
            f"bootstrap gives no interval (it needs at least {MIN_ROWS} rows, and {primary} defined on "
            "90% of the resamples), so this test split cannot tell the two apart. Give it more rows "
            "(a larger test file, or data.test_fraction).")


def _comparison_text(comparison: dict | None, tuned: Record) -> str:
    if comparison is None:
        return (f" No interval: the records' predictions are missing or not on the same rows "
                f"({tuned.n_eval} test rows); rerun the probe and the fine-tune.")
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


def _lexical(inputs: Inputs, frozen: Record, primary: str, runs_dir) -> tuple[dict | None, str]:
    """Whether the backbone adds anything over TF-IDF: the frozen choice against the lexical
    baseline, paired on the same rows."""
    lexical = [r for r in inputs.main if r.baseline == "lexical" and r.primary_metric == primary]
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


def _paired(inputs: Inputs, a: Record, b: Record, metric: str, runs_dir) -> dict | None:
    """featx.bootstrap.paired on the two records' stored predictions; None when either is
    missing or they are not predictions of the same rows."""
    from featx import bootstrap
    from featx.records import read_predictions, record_dir

    if runs_dir is None or a.task != b.task:
        return None
    try:
        pa = read_predictions(record_dir(runs_dir, a), a)
        pb = read_predictions(record_dir(runs_dir, b), b)
    except FeatxError:
        return None
    if not (np.array_equal(pa.ids, pb.ids) and np.array_equal(pa.labels, pb.labels)):
        return None
    result = bootstrap.paired(a.task, metric, pa.labels, (pa.scores, pa.threshold),
                              (pb.scores, pb.threshold))
    return result | {"split": a.protocol["report_on"]}


def _with_ci(record: Record, metric: str) -> str:
    value = _value(record, metric)
    ci = record.metrics_ci.get(metric)
    if ci and all(v is not None and math.isfinite(v) for v in ci):
        return f"{metric_text(value)} [{metric_text(ci[0])}, {metric_text(ci[1])}]"
    return metric_text(value)


def _value(record: Record, metric: str) -> float:
    value = record.metrics.get(metric, float("nan"))
    return float("nan") if value is None else value


def _fraction(ratio: float) -> str:
    """The frozen side's cost as a share of the fine-tune's: "1/6"; a percentage where a whole
    denominator is more than 5% off (0.77 was "1/1", 0.6 "1/2"); "1.3x" past it."""
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
