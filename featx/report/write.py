"""The frozen-vs-tuned report written out, every file of it or none.

`write_report` collects one configuration's records (`featx.report.collected`), judges them
(`featx.report.verdict`), draws them (`featx.report.plots`), describes them
(`featx.report.provenance`, `featx.report.notes`) and renders them (`featx.report.render`,
`featx.report.index`) into `data/reports/<pipeline>/<config id>/`: `report.md`, a
self-contained `report.html` (images embedded), the plots as PNG files, `results.csv` and
`verdict.json`, with the pipeline's `index.md` and `latest.json` beside the folders. Chooses no
record and computes no statistic.
"""
from __future__ import annotations

import os
from pathlib import Path

from featx.config.pipeline import Pipeline
from featx.errors import FeatxError
from featx.report.collected import collect
from featx.report.index import index_texts, verdict_json
from featx.report.notes import result_notes
from featx.report.plots import plots
from featx.report.provenance import configuration_lines, configuration_of
from featx.report.render import csv_text, html_text, markdown_text, rows, table_rows
from featx.report.verdict import verdict


def write_report(runs_dir: str | Path, reports_dir: str | Path, pipeline: str,
                 current: Pipeline | None = None) -> dict[str, Path]:
    """Build the report of one configuration of a pipeline (with `current`, of the pipeline as
    configured, else of its newest records) in its own folder, `reports/<pipeline>/<config id>/`,
    and the pipeline's index of configurations beside them; returns the paths written (md, html,
    csv, json: the verdict with its numbers and the configuration; index, latest)."""
    from featx.files import writable_dir

    collected = collect(runs_dir, pipeline, current)
    described = configuration_of(collected)
    root = Path(reports_dir).parent
    base = Path(reports_dir) / pipeline
    out_dir = writable_dir(base / described["id"], "the report directory", root=root)
    all_rows = rows(collected)
    header, cells = table_rows(all_rows)
    judged = verdict(collected, runs_dir, current)
    images = plots(collected, _matplotlib_dir(Path(reports_dir) / ".matplotlib", root), judged.label_curve)
    notes = result_notes(collected)
    settings = configuration_lines(collected, described)
    paths = {"md": out_dir / "report.md", "html": out_dir / "report.html", "csv": out_dir / "results.csv",
             "json": out_dir / "verdict.json", "index": base / "index.md", "latest": base / "latest.json"}
    contents = {out_dir / f"{name}.png": data for name, data in images.items()}
    page = dict(header=header, cells=cells, images=images, notes=notes, settings=settings)
    contents[paths["md"]] = markdown_text(collected, judged, **page).encode()
    contents[paths["html"]] = html_text(collected, judged, **page).encode()
    contents[paths["csv"]] = csv_text(all_rows).encode()
    contents[paths["json"]] = verdict_json(judged, described).encode()
    index, latest = index_texts(base, described, judged)
    contents[paths["index"]], contents[paths["latest"]] = index.encode(), latest.encode()
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
    """matplotlib's cache folder in the data directory, holding only regular files with one name
    and folders of them: matplotlib opens its font cache there by name, for reading and for
    writing, so a link of either kind would be written through and a FIFO would block."""
    from featx.files import own_file, refuse_link, writable_dir

    writable_dir(folder, "matplotlib's cache folder", root=root)
    for entry in [*folder.iterdir(), *(e for d in folder.iterdir() if d.is_dir() and not d.is_symlink()
                                       for e in d.iterdir())]:
        refuse_link(entry, "in matplotlib's cache folder")
        if not entry.is_dir():
            own_file(entry)
    return folder
