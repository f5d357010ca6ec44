"""What a report's numbers rest on: the backbone, the extraction, the probe and the fine-tune
settings, and the id of the configuration (`configuration_of`), which names the report's
folder; and the report's "Configuration" list of them (`configuration_lines`).
"""
from __future__ import annotations

import dataclasses

from featx.config.load import command, make_command
from featx.report.collected import Collected
from featx.report.repeats import repeats_setting
from featx.runs.schema import SECTIONS


def configuration_of(collected: Collected) -> dict:
    """What the report's records rest on: the backbone (name, fingerprint, revision), the
    extraction, the probe and the fine-tune settings, and the id of this configuration
    (`<cache key[:8]>-<probe config hash[:8]>-<fine-tune settings hash[:8]>`), which names its
    report folder."""
    from featx.files import utc_now
    from featx.runs.records import finetune_config_hash, probe_config_hash, settings_hash, stop_reason

    probes = [r for r in collected.main if r.stage == "probe"]
    tunes = [r for r in collected.main if r.stage == "finetune"]
    probe = max(probes, key=lambda r: r.created) if probes else None
    tune = max(tunes, key=lambda r: r.created) if tunes else None
    source = probe or tune or max(collected.control, key=lambda r: r.created)  # a control alone: its own
    recorded = probe.configuration if probe else dict.fromkeys(SECTIONS)
    tuned = tune.configuration if tune else dict.fromkeys(SECTIONS)
    current = collected.current
    if current is not None:
        probe_hash, tune_hash = probe_config_hash(current.probe), finetune_config_hash(current.finetune)
    else:
        probe_hash = probe.config_hash if probe else None
        tune_hash = (settings_hash(tuned["finetune"]) if "finetune" in tuned
                     else tune.run_hash if tune else None)
    config_id = "-".join(part[:8] if part else "none" for part in (source.cache_key, probe_hash, tune_hash))
    return {"id": config_id, "pipeline": collected.pipeline, "cache_key": source.cache_key, "written": utc_now(),
            "backbone": source.backbone, "extraction": source.extraction,
            "extract": recorded["extract"] or tuned["extract"] or {},
            "data": recorded["data"] or tuned["data"] or {},
            "probe": recorded["probe"], "probe_config_hash": probe_hash,
            # A backbone probe's (under cv a baseline's selection score is its first fold's alone).
            "protocol": max(probes, key=lambda r: (not r.baseline, r.created)).protocol if probes else None,
            "finetune": None if tune is None else tune.hyperparameters,
            "finetune_settings": ((tuned["finetune"] if "finetune" in tuned else None)
                                  or (dataclasses.asdict(current.finetune) if current else None)),
            "run_hash": tune.run_hash if tune else None,
            "stopped": None if tune is None else stop_reason(tune.converged, tune.stopped_by),
            "device": (tune.device if tune else None) or "?",
            "command": command(current, "report"), "make": make_command(current, "report")}


def configuration_lines(collected: Collected, described: dict) -> list[str]:
    """The report's "Configuration" list: the backbone and every setting the numbers rest on
    (`described`: `configuration_of`'s)."""
    lines = [_backbone_line(described["backbone"]), _extraction_line(described, collected.repeats),
             _probe_line(described), _finetune_line(described),
             f"This configuration: `{described['id']}`; this report: `{described['command']}` "
             f"(`{described['make']}`); every stage takes the same overrides."]
    if collected.others:
        lines.append("Other configurations of this pipeline with records (the command that reports each): "
                     + " | ".join(collected.others))
    return lines


def _backbone_line(backbone: dict) -> str:
    if not backbone["name"]:
        return "Backbone: not recorded (records of an older featx)."
    return (f"Backbone: `{backbone['name']}` (fingerprint `{str(backbone['fingerprint'])[:16]}`, "
            f"revision {_code_or(backbone['revision'], 'none (the files as found)')}, "
            f"init {backbone['init']}"
            + (f", seed {backbone['init_seed']}" if backbone["init_seed"] is not None else "")
            + f"; from {backbone['source'] or 'its folder'}).")


def _extraction_line(described: dict, repeats) -> str:
    """The extraction's settings, the rows it dropped or found in train too, and the reported
    rows that repeat another (`repeats`: `featx.report.repeats.Repeats`)."""
    extraction, extract = described["extraction"], described["extract"]
    layers = extraction["layers"] or {}
    stored = "; ".join(f"{p} {_span(v)}" for p, v in layers.items()) if isinstance(layers, dict) else ""
    dropped = extraction["dropped_empty"] or {}
    dropped_held = extraction["dropped_in_train"] or {}  # None: a cache of an older featx
    in_train = extraction["in_train"]  # None: a cache of an older featx
    max_length = extraction["max_length"]
    if max_length is None and "max_length" in extract:  # a record of an older featx: its setting
        max_length = extract["max_length"]
    return (f"Extraction: poolings and layers stored: {stored or 'not recorded'}; max_length "
            f"{max_length}; prompt "
            f"{_code_or(extraction['prompt'], 'none')}; compute {extraction['compute_dtype'] or '?'}, "
            f"stored {extraction['store_dtype'] or '?'}; rows dropped for an empty text: "
            + (", ".join(f"{s} {n}" for s, n in dropped.items()) if dropped else "none")
            + ("; rows dropped because train holds their text (data.drop_in_train): "
               + ", ".join(f"{s} {n}" for s, n in dropped_held.items()) if dropped_held else "")
            + "; rows whose text train holds too: "
            + ("not counted (a cache of an older featx)" if not isinstance(in_train, dict)
               else ", ".join(f"{s} {n}" for s, n in in_train.items()) if any(in_train.values()) else "none")
            + repeats_setting(repeats) + f"; cache key `{described['cache_key'][:16]}`.")


def _probe_line(described: dict) -> str:
    probe, protocol = described["probe"], described["protocol"]
    if probe:
        chosen = (f" ({protocol['name']}: chosen on {protocol['select_on']}, reported on {protocol['report_on']})"
                  if protocol else "")
        return (f"Probe (config `{described['probe_config_hash']}`): protocol {probe['protocol']}{chosen}; grid "
                f"{probe['grid']}; heads {', '.join(probe['heads'])}; baselines "
                f"{', '.join(probe['baselines']) or 'none'}; "
                f"poolings {comma_list(probe['poolings'], 'every one cached')}; "
                f"layers {comma_list(probe['layers'], '?')}; seeds {comma_list(probe['seeds'], '?')}; metric "
                f"{probe['metric'] or 'the task default'}.")
    if protocol:
        return (f"Probe: protocol {protocol['name']} (chosen on {protocol['select_on']}, reported on "
                f"{protocol['report_on']}); its other settings are not recorded.")
    return "Probe: no record of this configuration yet."


def _finetune_line(described: dict) -> str:
    tuned = described["finetune"]
    if tuned is None:
        return "Fine-tune: no record of this configuration yet."
    return (f"Fine-tune (run `{str(described['run_hash'])[:16]}`): head {tuned['head_input']}"
            + (" with LP-FT" if tuned["init_head_from_probe"] else "")
            + f"; learning rates {comma_list(tuned['learning_rates'], '?')} (search {tuned['search']}); "
            f"batch {tuned['batch_size']}; up to {tuned['max_epochs']} epochs"
            + (f" or {tuned['max_seconds']:g} s" if tuned["max_seconds"] else "")
            + f", plateau after {tuned['patience']} epochs without a gain beyond the selection "
            f"split's noise" + (f" (at least {tuned['min_delta']:g})" if tuned["min_delta"] else "")
            + "; seed "
            f"{tuned['seed']}; {tuned['dtype']} on {described['device']}; {described['stopped']}.")


def _code_or(value, absent: str) -> str:
    return absent if value in (None, "") else f"`{value}`"


def comma_list(values, absent: str) -> str:
    """A list or tuple as "a, b, c"; any other value as itself; `absent` for None."""
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
