"""The command line: each command builds a pipeline config and calls one library function.

    featx extract pipelines/trec.toml [section.key=value ...]

User errors (`FeatxError`) print one message and exit with status 2, without a traceback. Ctrl-C
and SIGTERM stop a command the same way (files written whole or not at all, a fine-tune
resumable from its last score) and say so: status 130 and 143.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from featx.config.pipeline import Pipeline
from featx.config.load import load_pipeline
from featx.cpus import share_cores
from featx.errors import FeatxError, Terminated
from featx.serve.manifest import refuse_export


def cmd_extract(pipeline: Pipeline) -> None:
    """Run the frozen backbone once; cache every pooling x layer in HDF5."""
    from featx.cache.distributed import extract_sharded, world
    from featx.cache.extract import extract

    # Launched by torchrun with several processes: each computes a shard, rank 0 assembles it.
    result = extract(pipeline) if world() is None else extract_sharded(pipeline)
    if world() is None or world()[0] == 0:  # one line, not one per rank
        print(result.path)


def cmd_probe(pipeline: Pipeline) -> None:
    """Train the probe grid on the cache: the first head (ridge by default) on every pooling and
    layer (the layer sweep), the other heads on its best features, and the baselines."""
    from featx.probe.stage import format_table, run_probe

    print(format_table(run_probe(pipeline), pipeline.runs_dir))


def cmd_finetune(pipeline: Pipeline) -> None:
    """Fine-tune the same backbone (the baseline); writes its record and best checkpoint."""
    from featx.finetune.stage import run_finetune
    from featx.probe.stage import format_table

    print(format_table([run_finetune(pipeline)]))


def cmd_curve(pipeline: Pipeline) -> None:
    """Train both sides again at a ladder of labelled-row budgets (the learning curve); the
    report then says from how many labels fine-tuning pays."""
    from featx.cache.extract import extract
    from featx.curve.stage import run_curve

    extract(pipeline)  # a cache hit when it exists; the curve probes and fine-tunes first when they have not run
    plan = run_curve(pipeline)
    print(plan.directory)


def cmd_report(pipeline: Pipeline) -> None:
    """Write the frozen-vs-tuned report (markdown, self-contained HTML, CSV) from the records."""
    import json

    from featx.report.write import write_report

    paths = write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name, pipeline)
    print(json.loads(paths["json"].read_text())["text"])
    for path in paths.values():
        print(path)


def cmd_all(pipeline: Pipeline) -> None:
    """The whole story: extract -> probe -> finetune (-> curve, with curve.enabled) -> report, with
    each stage's time."""
    import time

    timings = []
    stages = (("extract", cmd_extract), ("probe", cmd_probe), ("finetune", cmd_finetune),
              *((("curve", cmd_curve),) if pipeline.curve.enabled else ()), ("report", cmd_report))
    for name, command in stages:
        start = time.perf_counter()
        command(pipeline)
        timings.append((name, time.perf_counter() - start))
    print("stage times: " + ", ".join(f"{n} {s:.0f} s" for n, s in timings))


def cmd_verify(pipeline: Pipeline) -> None:
    """Check every byte of the pipeline's cache against the checksums written when it was finished."""
    import time

    from featx.cache.reader import Cache
    from featx.cache.plan import find_cache

    start = time.perf_counter()
    with Cache(find_cache(pipeline)) as cache:
        checked = cache.verify()
    print(f"{cache.path}: {len(checked)} datasets, {sum(checked.values()) / 1e6:.1f} MB match their "
          f"checksums ({time.perf_counter() - start:.2f} s)")


def cmd_info(pipeline: Pipeline) -> None:
    """Show where the pipeline's model resolves to, its cache (where it is, what it holds) and
    what has run for the pipeline: each configuration's records, current or not, and its report."""
    from featx.cache.reader import Cache
    from featx.cache.plan import find_cache
    from featx.backbone.resolve import resolve

    found = resolve(pipeline.model.name, pipeline.model.revision)
    print(f"model {pipeline.model.name}: {found.path} (found as {found.source}; resolved from a local "
          "folder, the Hugging Face cache, a packaged copy, then the hub)")
    if pipeline.data.text_pair:
        print(f"text pairs: {pipeline.data.text!r} and {pipeline.data.text_pair!r} reach the backbone as one "
              "sequence (the tokenizer's pair encoding: [CLS] a [SEP] b [SEP] for BERT, with token types "
              "where the model uses them) and, with extract.pair_singles, each text alone as well")
    with Cache(find_cache(pipeline)) as cache:
        print(cache)
        for key in ("model_name", "model_source", "init", "max_length", "compute_dtype",
                    "store_dtype", "created", "extract_stats"):
            print(f"  {key}: {cache.meta.get(key)}")
    for line in _what_ran(pipeline):
        print(line)


def _what_ran(pipeline: Pipeline) -> list[str]:
    """What has run for the pipeline, a line per configuration folder of each cache: its kind and
    id, its records, whether the pipeline as configured now made them, and the report folder."""
    from featx.runs.records import made_by, pipeline_records

    records = pipeline_records(pipeline.runs_dir, pipeline.name)
    if not records:
        return [f"runs: none yet in {Path(pipeline.runs_dir) / pipeline.name} (featx probe, featx finetune)"]
    folders: dict[str, list] = {}
    for record in records:
        where = "curve" if record.label_budget else record.stage
        folders.setdefault(f"{record.cache_key[:16]} {where}", []).append(record)
    lines = [f"runs in {Path(pipeline.runs_dir) / pipeline.name} (cache, kind: records):"]
    for key, found in sorted(folders.items()):
        ids = sorted({r.config_hash or (r.run_hash or "")[:16] for r in found} - {""})
        current = sum(made_by(r, pipeline) for r in found)
        lines.append(f"  {key} {', '.join(ids) or '?'}: {len(found)} record(s), {current} of this configuration, "
                     f"newest {max(r.created for r in found)}")
    for curve in sorted(Path(pipeline.runs_dir, pipeline.name).glob("*/curve-*")):
        points = [p for p in curve.glob("size-*-draw-*") if p.is_dir() and not p.is_symlink()]
        lines.append(f"  {curve.parent.name} curve {curve.name.removeprefix('curve-')}: {len(points)} point folder(s) "
                     "(featx.open_curve reads the current one)")
    reports = Path(pipeline.reports_dir) / pipeline.name
    if (reports / "index.md").is_file():
        lines.append(f"reports: {reports / 'index.md'} (every configuration's report)")
    return lines


def cmd_predict(pipeline: Pipeline, args) -> None:
    """Predict new texts with the verdict's frozen configuration (or --head, --finetuned)."""
    from featx.serve.predict import predict_file

    result = predict_file(pipeline, args.input, head=args.head, finetuned=args.finetuned, out=args.out,
                          format=args.format)
    # Predictions on stdout are a table a program reads: what featx says goes to stderr then.
    said = sys.stderr if result["out"] == "-" else sys.stdout
    if result["metrics"]:
        print(f"scored against the input's labels ({result['rows']} rows, 95% bootstrap intervals):", file=said)
        for name, entry in result["metrics"].items():
            print(f"  {name}: {_metric_line(entry, result['rows'])}", file=said)
    if result["out"] != "-":
        print(result["out"])


def _metric_line(entry: dict, rows: int) -> str:
    """A metric's value and interval; an undefined one says so and why (never a 0 or NaN)."""
    from featx.stats.bootstrap import MIN_ROWS

    if entry["value"] is None:
        return f"undefined ({entry['undefined']})"
    low, high = entry["ci"] or (float("nan"), float("nan"))
    interval = (f"[{low:.4f}, {high:.4f}]" if low == low and high == high else
                f"(no interval: {rows} rows are too few)" if rows < MIN_ROWS
                else "(no interval: undefined on most resamples)")
    return f"{entry['value']:.4f} {interval}"


def cmd_keys(section: str | None = None) -> int:
    """List every key a pipeline file takes, with its default and what it does (docs/keys.md)."""
    from featx.config.load import keys_reference

    print(keys_reference(section))
    return 0


def cmd_export(pipeline: Pipeline, args) -> None:
    """Export the fine-tuned model as a Hugging Face folder, or a frozen head with its backbone."""
    from featx.serve.export import export

    print(export(pipeline, args.directory, head=args.head, finetuned=args.finetuned))


# The commands that run a model or torch heads.
LOAD_TORCH = {"extract", "probe", "finetune", "curve", "all", "predict", "export"}
COMMANDS = {"extract": cmd_extract, "probe": cmd_probe, "finetune": cmd_finetune, "curve": cmd_curve,
            "report": cmd_report, "all": cmd_all, "info": cmd_info, "verify": cmd_verify}
# Commands with arguments of their own besides the pipeline and its overrides.
USE = {"predict": cmd_predict, "export": cmd_export}


def _summary(doc: str) -> str:
    """A docstring's first sentence, however many lines it spans (the command list's line)."""
    text = " ".join(doc.split())
    return text.split(". ")[0].rstrip(".") + "."


def _global_flags(parser: argparse.ArgumentParser, default) -> None:
    """--version, -q and -v, on the top-level parser (default False) and on every command's
    (default SUPPRESS: a flag given before the command is kept, one given after it is added)."""
    from featx.version import __version__

    parser.add_argument("--version", action="version", version=f"featx {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", default=default,
                        help="no progress bars (the one-line summaries stay)")
    parser.add_argument("-v", "--verbose", action="store_true", default=default, help="debug messages too")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="featx", description="Frozen encoder features vs fine-tuning, measured.")
    _global_flags(parser, False)
    flags = argparse.ArgumentParser(add_help=False)
    _global_flags(flags, argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    keys = commands.add_parser("keys", help=_summary(cmd_keys.__doc__), description=cmd_keys.__doc__,
                               parents=[flags])
    keys.add_argument("section", nargs="?", help="data, model, extract, probe, finetune or pipeline")
    for name, fn in (COMMANDS | USE).items():
        sub = commands.add_parser(name, help=_summary(fn.__doc__), description=fn.__doc__, parents=[flags])
        sub.add_argument("pipeline", help="pipeline TOML file, e.g. pipelines/trec.toml")
        if name == "predict":
            sub.add_argument("input", help="file of texts (CSV, TSV, JSONL, Parquet; labels optional), "
                             "or - for one text per line on stdin")
        if name == "export":
            sub.add_argument("directory", help="new folder to write")
        if name in USE:
            which = sub.add_mutually_exclusive_group()
            which.add_argument("--head", help="features/head as in the report, e.g. mean@5/logistic "
                               "(default: the verdict's best frozen configuration)")
            which.add_argument("--finetuned", action="store_true", help="the best fine-tuned model")
        if name == "predict":
            from featx.serve.output import FORMAT_NAMES

            sub.add_argument("--out", help="output file (.csv, .tsv, .jsonl or .parquet), or - for stdout "
                             "(default data/predictions/<pipeline>.csv)")
            sub.add_argument("--format", choices=FORMAT_NAMES, help="the output's format (default: by the "
                             "--out suffix; csv on stdout)")
        sub.add_argument("overrides", nargs="*", metavar="section.key=value",
                         help="override pipeline values, e.g. data.max_rows=500")
    return parser


def _terminated(signum, frame) -> None:
    # A second SIGTERM ends the process at once (Python's default), whatever the first is doing.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    # Python's default SIGTERM ends the process where it is, without its `finally` blocks: the
    # temporary files of a write in progress would stay, and nothing would say how to resume.
    # Left alone: a handler someone else installed (or SIG_IGN), a thread other than the main
    # one, and torchrun's ranks (a rank blocked in a collective never runs a Python handler,
    # and torchrun kills what its SIGTERM leaves).
    mine = (threading.current_thread() is threading.main_thread() and int(os.environ.get("WORLD_SIZE", "1")) <= 1
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    if mine:
        signal.signal(signal.SIGTERM, _terminated)
    try:
        return _main(argv)
    except (KeyboardInterrupt, Terminated) as exc:
        stopped = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"featx: {stopped}; rerun the same command to resume where it stopped", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        if mine:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    # Overrides may follow a flag (`featx predict P in.csv --finetuned key=value`), where
    # argparse has already closed the positional list: such leftovers are overrides too.
    args, rest = parser.parse_known_args(argv)
    stray = [item for item in rest if item.startswith("-") or "=" not in item]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    args.overrides = list(getattr(args, "overrides", [])) + rest  # `keys` takes none
    # -v is featx's own debug lines; the libraries it calls (matplotlib's font search: ~30 lines)
    # stay at INFO.
    logging.basicConfig(level=logging.INFO, format="featx: %(message)s", stream=sys.stderr)
    logging.getLogger("featx").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    try:
        if args.command == "keys":
            return cmd_keys(args.section)
        overrides = list(args.overrides) + (["progress=false"] if args.quiet else [])
        refuse_export(Path(args.pipeline), f"featx {args.command}")
        pipeline = load_pipeline(args.pipeline, overrides)
        if args.command in LOAD_TORCH:
            share_cores()  # before the stage loads torch: how its threads wait (featx.cpus)
        if args.command in USE:
            USE[args.command](pipeline, args)
        else:
            COMMANDS[args.command](pipeline)
    except FeatxError as exc:
        print(f"featx: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
