"""A pipeline's reports side by side: each report's verdict.json (the verdict, its numbers and
its configuration), and the pipeline's index.md of every configuration's report, read back from
those files, with latest.json pointing at the one just written. Text only: `featx.report.write`
writes it.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from featx.config.pipeline import ProbeConfig
from featx.errors import FeatxError
from featx.report.provenance import comma_list
from featx.report.verdict import Verdict


def index_texts(base: Path, described: dict, judged: "Verdict") -> tuple[str, str]:
    """(index.md, latest.json) of a pipeline's reports: every configuration's report folder, the
    newest first, and a stable pointer to the one just written (no link: a file)."""
    from featx.files import loads_json, read_text

    entries = {}
    for path in sorted(base.glob("*/verdict.json")):
        try:
            found = loads_json(read_text(path, "a report's verdict.json", limit=16 << 20))["configuration"]
            entries[found["id"]] = found | {"headline": str(found.get("headline", ""))}
        except (OSError, ValueError, KeyError, TypeError, FeatxError):
            continue  # a report folder of an older featx, or a damaged one: left out of the index
    entries[described["id"]] = described | {"headline": headline(judged.text)}
    ordered = sorted(entries.values(), key=lambda entry: str(entry.get("written")), reverse=True)
    lines = [f"# featx reports: {described['pipeline']}", "",
             f"Latest: [{described['id']}]({described['id']}/report.md), written {described['written']} "
             f"(`{described['command']}`).", "",
             "| configuration | backbone | fingerprint | init | probe | fine-tune | written | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    # What tells configurations apart beyond the cells' usual settings: the settings that differ
    # between the listed ones (two that differ only by their seeds must not read alike).
    data, extract, probes, tunes = (_differing(ordered, section)
                                    for section in ("data", "extract", "probe", "finetune_settings"))
    for entry in ordered:
        backbone = entry.get("backbone") if isinstance(entry.get("backbone"), dict) else {}
        probe = entry.get("probe") if isinstance(entry.get("probe"), dict) else {}
        tuned = entry.get("finetune") if isinstance(entry.get("finetune"), dict) else {}
        lines.append("| " + " | ".join(_index_cell(v) for v in (
            f"[{entry['id']}]({entry['id']}/report.md)",
            (backbone.get("name") or "?") + _settings(entry, "data", data) + _settings(entry, "extract", extract),
            str(backbone.get("fingerprint") or "?")[:12], backbone.get("init") or "?",
            (f"{probe.get('protocol', '-')}, {probe.get('grid', '-')}{_settings(entry, 'probe', probes)}"
             if probe else "-"),
            f"{tuned.get('head_input')}, lr {comma_list(tuned.get('learning_rates'), '?')}"
            f"{_settings(entry, 'finetune_settings', tunes)}" if tuned else "-",
            entry.get("written", "?"), entry.get("headline", ""))) + " |")
    latest = {"id": described["id"], "report": f"{described['id']}/report.md",
              "html": f"{described['id']}/report.html", "verdict": f"{described['id']}/verdict.json",
              "written": described["written"], "command": described["command"]}
    return "\n".join(lines) + "\n", json.dumps(latest, indent=1) + "\n"


# The settings an index cell shows for every configuration, whatever the others': not repeated.
SHOWN = ("protocol", "grid", "head_input", "learning_rates")
# Seeds other than the probe's default are shown even when every listed configuration has them:
# the numbers are means over them.
DEFAULT_SEEDS = list(ProbeConfig.seeds)


def _differing(entries: list[dict], section: str) -> list[str]:
    """The keys of a configuration `section` whose values differ between the `entries` that hold
    the section (their verdict.json configurations; a frozen-only or older one may lack it),
    sorted, and the probe's `seeds` wherever they are not the default."""
    # Among the configurations that have the section: a frozen-only one has no fine-tune settings.
    sections = [entry[section] for entry in entries if isinstance(entry.get(section), dict)]
    keys = sorted({key for found in sections for key in found} - set(SHOWN))
    differ = [key for key in keys if len({json.dumps(found.get(key), sort_keys=True, default=str)
                                          for found in sections}) > 1]
    seeds = section == "probe" and any(found.get("seeds", DEFAULT_SEEDS) != DEFAULT_SEEDS for found in sections)
    return sorted(set(differ) | ({"seeds"} if seeds else set()))


def _settings(entry: dict, section: str, keys: list[str]) -> str:
    """`, key value` for each of `keys` the entry's `section` holds (a value as JSON: `[0, 1]`)."""
    found = entry.get(section) if isinstance(entry.get(section), dict) else {}
    return "".join(f", {key} {found[key] if isinstance(found[key], str) else json.dumps(found[key], default=str)}"
                   for key in keys if key in found)


def _index_cell(value) -> str:
    """A value as one cell of the index's markdown table."""
    return str(value).replace("|", "/").replace("\n", " ")


def headline(text: str) -> str:
    """The verdict's first sentence, for the index."""
    first = text.split(". ")[0]
    return first if first.endswith(".") else first + "."


def verdict_json(judged: "Verdict", described: dict) -> str:
    """verdict.json: the verdict's text, its records and numbers, and the configuration (with the
    headline the index shows)."""
    document = {"text": judged.text, "frozen": _record_summary(judged.frozen), "tuned": _record_summary(judged.tuned),
                "quality_ratio": judged.quality_ratio, "compute_ratio": judged.compute_ratio,
                "comparison": judged.comparison, "lexical": judged.lexical, "label_curve": judged.label_curve,
                "configuration": described | {"headline": headline(judged.text)}}
    # An undefined metric is null: bare NaN tokens are not JSON, and a strict parser refuses them.
    return json.dumps(_nan_free(document), indent=1, default=str, allow_nan=False) + "\n"


def _record_summary(record) -> dict | None:
    """The fields of a verdict's record that verdict.json keeps."""
    if record is None:
        return None
    return {k: getattr(record, k) for k in (
        "features", "head", "init", "primary_metric", "metrics", "metrics_ci", "n_eval", "converged")}


def _nan_free(value):
    """`value` with every NaN or infinite float (at any depth) made None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_free(v) for v in value]
    return value
