"""The pipeline's other configurations: the `key=value` overrides that select the one a record
was made with, and one line per configuration with the command that runs a stage on it (what a
report or predict says when the records it needs are another configuration's).
"""
from __future__ import annotations

import dataclasses
import json
import re

from featx.runs.records import configuration
from featx.runs.schema import Record


def overrides_to(recorded: dict, pipeline) -> tuple[list[str], list[str]]:
    """(the `section.key=value` overrides that turn `pipeline` into the configuration a record
    was made with, the keys that must be unset: a null TOML cannot write)."""
    now = configuration(pipeline)
    overrides, unset = [], []
    for section, fields in recorded.items():
        for key, value in (fields if isinstance(fields, dict) else {}).items():
            if section in now and key in now[section] and now[section][key] != value:
                if value is None:
                    unset.append(f"{section}.{key}")
                else:
                    overrides.append(f"{section}.{key}={_literal(value)}")
    return overrides, unset


def _literal(value, inside: bool = False) -> str:
    """A value as the command line's `key=value` takes it: a bare word where one reads back as
    this string, else a TOML literal."""
    import tomllib

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(_literal(v, inside=True) for v in value) + "]"
    if isinstance(value, str):
        if not inside and re.fullmatch(r"[A-Za-z0-9_./@:+~-]+", value):
            try:
                tomllib.loads(f"v = {value}")  # a number, a boolean or a date: quote it
            except tomllib.TOMLDecodeError:
                return value
        return json.dumps(value)
    return repr(value)


def elsewhere(others: list[Record], pipeline, stage: str, *, args: tuple[str, ...] = (),
              limit: int = 6) -> list[str]:
    """One line per configuration the `others` records (this pipeline's, not made by `pipeline`
    as configured) were made with: the overrides that select it, what it holds, and the command
    that runs `stage` on it (also as `make`, for the stages the Makefile has)."""
    from featx.config.load import command, make_command

    groups: dict[tuple, list[Record]] = {}
    for record in others:
        recorded = record.configuration
        if any(isinstance(section, dict) for section in recorded.values()):
            overrides, unset = overrides_to(recorded, pipeline)
            key = tuple(sorted(overrides) + [f"unset {k}" for k in sorted(unset)])
        else:
            key = ("unrecorded",)
        groups.setdefault(key, []).append(record)
    lines = []
    for key, records in sorted(groups.items(), key=lambda g: max(r.created for r in g[1]), reverse=True):
        probes = sum(r.stage == "probe" for r in records)
        tunes = len(records) - probes
        held = ", ".join(part for part in (f"{probes} probe record(s)" if probes else "",
                                           f"{tunes} fine-tune(s)" if tunes else "") if part)
        newest = max(r.created for r in records)
        if key == ("unrecorded",):
            lines.append(f"{held} whose settings their records do not show (newest {newest})")
            continue
        overrides = [k for k in key if not k.startswith("unset ")]
        unset = [k.removeprefix("unset ") for k in key if k.startswith("unset ")]
        if not overrides and not unset:
            lines.append(f"{held} of these same settings on an earlier cache (newest {newest}): a data or "
                         "model file has changed since, so they describe other data or weights")
            continue
        base = pipeline
        if unset and pipeline is not None:  # an override of a key to unset is dropped from the command
            base = dataclasses.replace(pipeline, overrides=tuple(
                o for o in pipeline.overrides if o.partition("=")[0].strip() not in unset))
        run = f"`{command(base, stage, *overrides, args=args)}`"
        if stage in ("extract", "probe", "finetune", "report", "all") and not args:
            run += f" (`{make_command(base, stage, *overrides)}`)"
        still = (f"; and unset {', '.join(unset)} in the pipeline file if it sets them" if unset else "")
        lines.append(f"{' '.join(overrides) or 'unset ' + ', '.join(unset)}: {held} (newest {newest}): {run}{still}")
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
    return lines
