"""The records a report reads: those of one configuration of a pipeline, never a mix of two.

`collect` gathers the configuration's records on its cache and on its random-init control's
cache (each checked against its predictions: `checked`), the notes on what is incomplete or
uncertain, the pipeline's other configurations with records, the reported rows that repeat
another (the records' intervals then computed again over the distinct rows:
`featx.report.repeats`), and the frozen choice, into a `Collected`. It writes no sentence of the
verdict (`featx.report.verdict`) and no file (`featx.report.write`).
"""
from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass
from pathlib import Path

from featx.runs.choice import FrozenChoice, frozen_choice
from featx.config.pipeline import Pipeline
from featx.config.load import command, make_command
from featx.errors import FeatxError
from featx.runs.schema import Record
from featx.runs.records import current_records, pipeline_records
from featx.report.repeats import Repeats, count_repeats, distinct_intervals, missing_note


@dataclass
class Collected:
    """What one report is made from: one configuration's records, with what is known about them."""
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
    repeats: "Repeats | None" = None
    """Which reported rows repeat another (`featx.report.repeats`): the records' intervals are
    over the distinct rows, and so are the comparisons'."""


def collect(runs_dir: str | Path, pipeline: str, current: "Pipeline | None" = None) -> Collected:
    """The records of one configuration of the pipeline, never a mix of two.

    With `current` (the pipeline as configured now, overrides included): the records its
    configuration made (its probe config hash, fine-tunes of its settings) on its cache (the one
    `featx extract` with the same overrides finds) and on its random-init control's cache.
    Records only under other overrides are an error that names each configuration with the
    command that reports it. Without `current` (a library call on records alone): the newest
    probe configuration and the newest fine-tune of the newest pretrained cache."""
    from featx.runs.others import elsewhere

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
        checked(main + control, runs_dir)
        return Collected(pipeline, main, control, notes=[], choice=frozen_choice(main, runs_dir),
                         repeats=count_repeats(None, main))
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
    checked(main + control, runs_dir)
    repeats = count_repeats(current, main)
    main, without = distinct_intervals(main, repeats, runs_dir)
    control, also_without = distinct_intervals(control, repeats, runs_dir)
    notes += missing_note(without + also_without, repeats)
    return Collected(pipeline, main, control, notes, others, current, frozen_choice(main, runs_dir), caution,
                     repeats)


def checked(records: list[Record], runs_dir) -> None:
    """Refuse the report when a record's predictions file is there but damaged, or its numbers are
    not what its predictions give (`featx.runs.records.read_predictions`): the report would show
    them. A record whose predictions are missing is shown without the comparisons they make."""
    import os

    from featx.runs.records import read_predictions, record_dir

    for record in records:
        directory = record_dir(runs_dir, record)
        if record.predictions and os.path.lexists(directory / record.predictions["file"]):
            read_predictions(directory, record)


def _brief(pipeline: "Pipeline") -> str:
    return (f"model {pipeline.model.name}, init {pipeline.model.init}, probe protocol "
            f"{pipeline.probe.protocol}, grid {pipeline.probe.grid}")


def _newest(everything: list[Record]) -> tuple[list[Record], list[Record]]:
    """(main, control) without a pipeline: on the newest pretrained (and random-init) cache, the
    records of its newest probe configuration and of its newest fine-tune."""
    def newest_of(init: str) -> list[Record]:
        records = _newest_cache([r for r in everything if r.init == init])
        chosen = []
        for stage, field in (("probe", "config_hash"), ("finetune", "run_hash")):
            staged = [r for r in records if r.stage == stage]
            if staged:
                newest = getattr(max(staged, key=lambda r: r.created), field)
                chosen += [r for r in staged if getattr(r, field) == newest]
        return chosen
    return newest_of("pretrained"), newest_of("random")


def _current(runs_dir, everything: list[Record],
             current: "Pipeline") -> tuple[list[Record], list[Record], list[str], str | None]:
    """(main, control, notes, caution) of the pipeline as configured: its records on its cache;
    when it has no cache, on the newest cache of the same settings, said first (the caution)."""
    from featx.cache.plan import find_cache, last_cache_key
    from featx.runs.records import probe_config_hash, probe_dir

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
        fingerprint = _backbone_fingerprint(main[0])
        control = _newest_cache([r for r in mine if r.init == "random" and _same_cache_settings(r, current, "random")
                                 and _backbone_fingerprint(r) == fingerprint])
    for records in (main, control):
        if records:
            folder = probe_dir(runs_dir, current.name, records[0].cache_key, probe_config_hash(current.probe))
            notes += _interrupted(folder, current, len([r for r in records if r.stage == "probe"]))
    return main, control, notes, caution


def _backbone_fingerprint(record: Record) -> str | None:
    """The backbone files' fingerprint a record was made from (None in a record of an older featx)."""
    return record.backbone["fingerprint"] if record.backbone else None


def _same_cache_settings(record: Record, pipeline: "Pipeline", init: str,
                         sections: tuple[str, ...] = ("data", "model", "extract")) -> bool:
    """Whether a record was made on a cache of the pipeline's data, model (with `init`) and
    extraction settings (those of `sections`), as its `configuration` says."""
    from featx.runs.records import configuration

    now = configuration(pipeline)
    now["model"]["init"] = init
    return all(_with_defaults(record.configuration[section], now[section], getattr(pipeline, section))
               == now[section] for section in sections)


def _with_defaults(recorded: dict, now: dict, cfg) -> dict:
    """A record's configuration section with the keys a later featx added (absent from it) at
    their defaults: an older record was made as the default of a key it did not know."""
    defaults = {f.name: f.default for f in dataclasses.fields(cfg) if f.default is not dataclasses.MISSING}
    return recorded | {key: defaults[key] for key in now if key not in recorded and key in defaults}


def _newest_cache(records: list[Record]) -> list[Record]:
    if not records:
        return []
    key = max(records, key=lambda r: r.created).cache_key
    return [r for r in records if r.cache_key == key]


def _interrupted(directory: Path, pipeline: "Pipeline", found: int) -> list[str]:
    from featx.runs.records import probe_config_hash, probe_interrupted

    run = probe_interrupted(directory, probe_config_hash(pipeline.probe))
    if run is None:
        return []
    return [f"The probe run was interrupted: {found} of its {run.get('planned')} fits have records; rerun "
            f"`{command(pipeline, 'probe')}` to finish it (finished fits are redone, not lost)."]
