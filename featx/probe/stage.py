"""Probing: heads trained on cached features with an honest protocol. Never touches torch.

This module plans the probe and runs the stage: which (features, head) jobs a cache gets, the
staged grid (the first head on every feature set, the others on the best one), parallel
workers, records, the layer sweep and reuse of a finished run. One job is featx/probe/job.py's, the
protocols and the hyperparameter search featx/probe/search.py's (its docstring states the protocols),
the baselines' reuse featx/probe/baselines.py's.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from featx.heads import registry as H
from featx.stats import metrics as M
from featx.probe.baselines import Baselines
from featx.cache.reader import Cache
from featx.config.pipeline import MODEL_POOLING_NAMES, Pipeline, ProbeConfig
from featx.errors import FeatxError
from featx.files import writable_dir
from featx.probe.job import TEXT, Features, probe_one
from featx.runs.schema import Record, metric_text, spread_text, train_seconds
from featx.runs.records import configuration, probe_config_hash, probe_dir, read_records, read_run_status, record_name, write_json, write_record, write_run_status
from featx.runs.choice import selection_difference_se, selection_score, stored_selection
from featx.probe.search import choose_protocol
from featx.tasks import TASKS
from featx import cpus

log = logging.getLogger("featx")


def heads_for(task: str, cfg: ProbeConfig) -> tuple[tuple[str, ...], str]:
    """(the heads, the sweep head) a task runs: on a regression task ridge is logistic's model
    (Ridge), so it runs once, named logistic."""
    if not TASKS[task].regression:
        return cfg.heads, cfg.sweep_head
    named = lambda head: "logistic" if head == "ridge" else head  # noqa: E731
    return tuple(dict.fromkeys(map(named, cfg.heads))), named(cfg.sweep_head)


def plan_jobs(cache: Cache, cfg: ProbeConfig) -> tuple[list[tuple[Features, str]], list[str]]:
    """(first-stage jobs, heads of the second stage). Checks that the cache holds every pooling
    and layer asked for (the error lists what it has).

    staged: the first head (ridge) on every feature set, the sweep and the baselines; the
    second stage runs the other heads on the feature set the first stage scored best. full: the
    first stage is every head on every feature set. Under the mteb protocol: MTEB's one
    classifier on the model's own embedding."""
    mteb = cfg.protocol == "mteb"
    poolings = cfg.poolings or (_mteb_poolings(cache) if mteb else tuple(cache.poolings))
    heads, sweep_head = heads_for(cache.task, cfg)
    heads = ("logistic",) if mteb else heads
    scouts = heads if cfg.grid == "full" else heads[:1]
    kinds = pair_kinds(cache, cfg)
    jobs = []
    for layer_spec in cfg.layers:
        for pooling in poolings:
            layers = tuple(cache.layer_indices(pooling, layer_spec))
            if pooling in MODEL_POOLING_NAMES and isinstance(layer_spec, str) and layer_spec != "last":
                continue  # the model's own poolings have only the last layer: nothing to concatenate
            jobs += [(Features(pooling, layers, kind), head) for kind in kinds for head in scouts]
    if "cos" in kinds and TASKS[cache.task].regression and len(cache.label_names) == 1:
        # The zero-training row MTEB reports for STS: the cosine of the model's own embeddings.
        pooling = "sentence" if "sentence" in cache.poolings else "mean"
        jobs.append((Features(pooling, (cache.layers(pooling)[-1],), "cos"), "identity"))
    if cfg.sweep and not mteb:
        if cfg.sweep_pooling in cache.poolings:
            for layer in cache.layers(cfg.sweep_pooling):
                jobs.append((Features(cfg.sweep_pooling, (layer,)), sweep_head))
        else:
            log.info("no layer sweep: the cache has no %r pooling", cfg.sweep_pooling)
    if not mteb:
        # First: the TF-IDF fit is the longest job; started first, the short ones fill the
        # other workers around it instead of waiting behind it at the end.
        jobs = [(TEXT, name) for name in cfg.baselines[::-1]] + jobs
    later = [] if mteb or cfg.grid == "full" else list(heads[1:])
    outputs = len(cache.label_names)
    for head in list(later):
        limit = H.HEADS[head].max_outputs
        if limit is not None and not TASKS[cache.task].regression and outputs > limit:
            later.remove(head)
            log.info("%s is left out of the staged grid: %d %s make it cost classes x rounds x trees, "
                     "more than the backbone pass (it was the weakest head on dense embeddings); "
                     "probe.grid = \"full\" runs it", head, outputs,
                     "classes" if TASKS[cache.task].classes else "labels")
    return list(dict.fromkeys(jobs)), later


def pair_kinds(cache: Cache, cfg: ProbeConfig) -> tuple[str, ...]:
    """The feature sets of each pooling and layer: joint only for single texts (and under the
    mteb protocol); for pairs, those of probe.pair_features the cache can build."""
    if cfg.protocol == "mteb" or cache.text_pairs(cache.splits[0]) is None:
        return ("joint",)
    if cache.has_singles:
        return cfg.pair_features
    kinds = tuple(k for k in cfg.pair_features if k == "joint")
    log.warning("the cache holds no single-text vectors (extract.pair_singles = false): the pair "
                "feature sets %s are left out", [k for k in cfg.pair_features if k != "joint"])
    if not kinds:
        raise FeatxError("probe.pair_features asks only for bi-encoder feature sets, but the cache "
                         "was extracted with extract.pair_singles = false; rerun featx extract "
                         "without it, or add \"joint\" to probe.pair_features")
    return kinds


def _mteb_poolings(cache: Cache) -> tuple[str, ...]:
    if "sentence" in cache.poolings:
        return ("sentence",)
    log.warning("the cache has no `sentence` pooling (the model's own embedding, which MTEB "
                "evaluates); the mteb protocol runs on raw `mean` vectors, so its numbers can "
                "differ from MTEB's")
    return ("mean",)


# ---------------------------------------------------------------------------------------------
# The probe stage


def run_probe(pipeline: Pipeline) -> list[Record]:
    """Probe the pipeline's cache with its grid, layer sweep and baselines; write records;
    return them."""
    from featx.progress import progress

    cfg = pipeline.probe
    path, directory, (first, later), (scout, sweep_head) = _checked(pipeline)
    finished = finished_run(directory, cfg)
    if finished is not None:
        log.info("reused the %d records of the finished identical probe run (this configuration, this "
                 "cache) in %s; delete that folder to probe again", len(finished), directory)
        return finished
    heads_dir = directory / "heads" if cfg.save_heads else None
    run = _Run(path, cfg, pipeline.name, directory, heads_dir, configuration(pipeline, "probe"),
               Baselines(pipeline.baselines_dir, pipeline.root, path, cfg, pipeline.name))
    total = len(first) + len(later)
    # The baselines read no vector and decide nothing the second stage needs: they start first
    # and run beside both stages (the TF-IDF fit is the longest job; in a stage of its own it
    # would hold the stage open with the other worker idle).
    baselines = [job for job in first if job[0] == TEXT]
    first = [job for job in first if job not in baselines]
    log.info("probing %s: %d (features, head) fits%s", path.name, total,
             f" (then {len(later)} heads on the best of the first {len(first)}: one feature set, or "
             f"two in a near tie)" if later else "")
    start = time.perf_counter()
    # What this run will write: the report tells an interrupted run from a finished one by it.
    manifest = {"config_hash": probe_config_hash(cfg), "planned": total, "finished": False}
    write_run_status(directory, manifest)
    with progress(total=total, enabled=pipeline.progress, desc="probe", unit="fit") as bar, \
            _Workers(run, bar) as workers:
        started = workers.submit(sorted(baselines, key=lambda job: -H.HEADS[job[1]].cost))
        records = workers.gather(workers.submit(first, scout=scout if later else None))
        # The second stage: the other heads on the best feature set. The scout head's rows rank
        # the feature sets (not the no-training cosine, not the baselines).
        scouted = [r for r in records if r.head == scout]
        stage = []
        if later and scouted:
            for chosen in _second_stage_features(scouted, first, directory):
                stage += [(chosen, head) for head in later]
            log.info("second stage on %s: %s", " and ".join(dict.fromkeys(f.name for f, _ in stage)),
                     ", ".join(later))
            # The longest fits first (a stable sort keeps the plan's order among equals).
            stage.sort(key=lambda job: -H.HEADS[job[1]].cost)
            # Known only now: the second stage runs on one feature set or two.
            manifest["planned"] = bar.total = len(records) + len(baselines) + len(stage)
            write_run_status(directory, manifest)
        second = workers.submit(stage)
        records += workers.gather(started) + workers.gather(second)
    if cfg.sweep:
        _write_sweep(directory, records, cfg.sweep_pooling, sweep_head)
    write_run_status(directory, manifest | {"planned": len(records), "finished": True})
    _remove_stale(directory, records)
    log.info("probe done in %.1f s; records in %s", time.perf_counter() - start, directory)
    return records


def _checked(pipeline: Pipeline):
    """(the cache, the configuration's folder, (first-stage jobs, second-stage heads), (the scout
    head, the sweep head)), once the cache can be probed: an unusable protocol, training split or
    selection split fails here, before any worker is forked."""
    from featx.cache.plan import find_cache

    cfg = pipeline.probe
    path = find_cache(pipeline)
    with Cache(path) as cache:
        jobs = plan_jobs(cache, cfg)
        (scout, *_), sweep_head = heads_for(cache.task, cfg)
        protocol = choose_protocol(cfg.protocol, cache.splits, cfg.folds, cache.n_rows("train"),
                                   cfg.cv_max_rows)
        M.check_trainable(cache.task, cache.labels("train"), cache.label_names)
        metric = "accuracy" if protocol.name == "mteb" else M.primary(cache.task, cfg.metric)
        M.check_defined(cache.task, metric, {s: cache.labels(s) for s in dict.fromkeys(
            [protocol.report_on] + (["dev"] if protocol.name == "dev" else []))}, cache.label_names)
        if protocol.name == "dev":
            M.check_selectable(cache.task, cache.labels("train"), cache.labels("dev"), cache.label_names)
        _warn_constant_labels(cache)
        directory = writable_dir(probe_dir(pipeline.runs_dir, pipeline.name, cache.key, probe_config_hash(cfg)),
                                 root=pipeline.root)
    return path, directory, jobs, (scout, sweep_head)


@dataclass(frozen=True)
class _Run:
    """What every stage of one probe run shares: where it reads and writes, and the store of
    baselines it reuses."""
    path: Path
    cfg: ProbeConfig
    pipeline: str
    directory: Path
    heads_dir: Path | None
    settings: dict
    store: Baselines


class _Workers:
    """The run's worker processes (probe.n_jobs, default one per core, each with its share of the
    cores as threads), given jobs as they become known: the baselines at once, the second stage
    once the scouts are in. With one worker the jobs run in this process, in order, when gathered."""

    def __init__(self, run: _Run, bar):
        # The cores this process may run on (taskset, a cpuset, a cgroup quota: featx.cpus), as
        # the extraction counts them: os.cpu_count() is every core of the host.
        cores = cpus.available()
        self.run, self.bar, self.workers = run, bar, run.cfg.n_jobs or cores
        # The share of the configured processes, not of a stage's job count: a stage of one job
        # (the MLP past 20 classes) would run on every core's thread, and BLAS threads that spin
        # on a shared machine make it 10x slower (bench/HISTORY.md, Probe cost). Fits also stay
        # the same whatever the stage's size (threads change the products' rounding).
        self.threads = max(1, cores // self.workers)
        self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        if kind is not None and self._pool is not None:  # a failed or interrupted run: stop the others' fits
            self._pool.shutdown(wait=True, kill_workers=True)

    def submit(self, jobs: list[tuple[Features, str]], *, scout: str | None = None) -> list:
        """Start `jobs` (a stored baseline of the same data and settings is reused instead);
        `scout` names the head whose records rank the feature sets. Returns what `gather` takes."""
        run = self.run
        started = []
        for features, head in jobs:
            if features == TEXT and run.store.reuse(head, run.directory, run.heads_dir, run.settings):
                started.append((run.store.reused[head], scout))
                continue
            fit = functools.partial(probe_one, str(run.path), features, head, run.cfg, pipeline=run.pipeline,
                                    threads=self.threads, heads_dir=run.heads_dir)
            started.append((self._executor().submit(fit) if self.workers > 1 else fit, scout))
        return started

    def gather(self, started: list) -> list[Record]:
        """The records of submitted jobs, in the order submitted, each written as it comes."""
        from concurrent.futures.process import BrokenProcessPool  # loky's TerminatedWorkerError is one

        records = []
        for job, scout in started:
            if not isinstance(job, Record):
                try:
                    record, predictions = job.result() if self.workers > 1 else job()
                except BrokenProcessPool as exc:
                    codes = str(exc).partition("The exit codes of the workers are ")[2].split("\n")[0]
                    raise FeatxError(
                        f"a probe worker process was killed while fitting (exit codes {codes or 'unknown'}): "
                        f"most often the system ran out of memory, {self.workers} workers each holding a "
                        "feature set; set probe.n_jobs lower (probe.n_jobs=1 fits one at a time, in this "
                        "process) and rerun") from None
                # A scout's record ranks feature sets for the second stage; the verdict chooses
                # among the heads that stage fitted (featx.runs.choice).
                job = write_record(self.run.directory, dataclasses.replace(
                    record, configuration=self.run.settings, scout=record.head == scout), predictions)
                if job.baseline:
                    self.run.store.keep(job, predictions, self.run.heads_dir)
            records.append(job)
            self.bar.update(1)
        return records

    def _executor(self):
        from joblib.externals.loky import get_reusable_executor

        if self._pool is None:
            # Thread caps for the libraries that read them at import, as joblib sets them.
            caps = {name: os.environ[name] if name in os.environ and name not in cpus.set_here else str(self.threads)
                    for name in THREAD_VARIABLES}
            self._pool = get_reusable_executor(max_workers=self.workers, env=caps | malloc_keeps_memory(),
                                               timeout=300, initializer=die_with_parent, initargs=(os.getpid(),))
        return self._pool


def die_with_parent(parent: int) -> None:
    """In a worker process: exit as soon as the process that started it is gone. A probe killed
    with SIGKILL cannot stop its workers, and loky keeps an idle worker for minutes, holding the
    probe's stdout (`featx probe ... | tee log` would not end). A daemon thread watches the
    parent's pid (the kernel's parent-death signal follows the thread that forked, which in a
    pool need not live as long as the pool)."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="featx-parent-watch", daemon=True).start()


def malloc_keeps_memory() -> dict[str, str]:
    """GLIBC_TUNABLES for a worker process whose heap keeps the memory it frees: blocks up to 32
    MiB come from the heap instead of fresh mappings (glibc's largest threshold), and freed
    memory stays mapped. A fit allocates and frees the same arrays step after step (a softmax of
    rows x classes, the bootstrap's counts); from fresh mappings each step pays their page faults
    again, which on a virtual machine costs up to tens of microseconds a page (bench/HISTORY.md,
    Probe cost). The worker's RSS stays at its peak until it exits. A user's own glibc.malloc
    settings win; other C libraries ignore the variable."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc." in tunables:
        return {}
    ours = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296"
    return {"GLIBC_TUNABLES": f"{tunables}:{ours}" if tunables else ours}


# The variables the numeric libraries size their thread pools by (joblib's list).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def _second_stage_features(scouted: list[Record], first: list[tuple[Features, str]],
                           directory: Path | None = None) -> list[Features]:
    """The scout's best feature set, and its runner-up when the selection rows cannot tell the
    two apart: a scout ranks, and a near tie is the scout's noise, not the heads' (TREC fine
    under cv: `mean@4` 0.7721, `mean@5` 0.7717; the MLP scores 5 points better on test on the
    second). "Cannot tell apart" is judged as the verdict judges its candidates
    (featx.runs.choice): the gap within one standard error of the two's paired difference on the same
    selection rows (their stored predictions in `directory`), else of the best's score. Two
    neighbouring layers err on the same rows: their difference is far less noisy than either
    score, and a lead beyond it is the scout's to give (75 classes: `mean@3` leads `mean@4` by
    0.0038, the score's error 0.0049, the difference's 0.0035), sparing a second stage on both.
    Ties go to the earlier feature set of the plan (the last layer
    first), so the choice never depends on which fit finished first."""
    order = {f.name: i for i, (f, _) in enumerate(first)}
    # A NaN score ranks last (sorting by NaN scrambles the order: the best could rank anywhere).
    score = lambda r: -math.inf if math.isnan(selection_score(r)) else selection_score(r)  # noqa: E731
    ranked = sorted(scouted, key=lambda r: (-score(r), order.get(r.features, 0)))
    best = ranked[:1]
    if len(ranked) > 1 and score(ranked[0]) - score(ranked[1]) <= _tie_error(ranked[0], ranked[1], directory):
        best.append(ranked[1])
    return [Features(r.pooling, tuple(r.layers), r.combine) for r in best]


def _tie_error(top: Record, other: Record, directory: Path | None) -> float:
    """The standard error the scout's best and runner-up are told apart by: of their paired
    difference on the selection rows when both records' selection predictions are stored on the
    same rows, else of the best's score."""
    se = None if directory is None else selection_difference_se(
        top, top.primary_metric, stored_selection(directory, top), stored_selection(directory, other))
    return (top.selection_se or 0.0) if se is None else se


def finished_run(directory: Path, cfg: ProbeConfig) -> list[Record] | None:
    """The records of this configuration's last run when it finished and left every record (with
    its heads, when heads are to be saved), else None: an identical probe is not fitted twice."""
    status = read_run_status(directory, probe_config_hash(cfg))
    if status is None or status.get("finished") is not True:
        return None
    try:
        records = read_records(directory)
    except FeatxError:
        return None  # a damaged record: the run is redone, and its records replaced
    if len(records) != status.get("planned") or any(r.config_hash != status["config_hash"] for r in records):
        return None
    if cfg.save_heads and any(r.heads is None for r in records if r.protocol["name"] != "mteb"):
        return None  # made with probe.save_heads = false: fitted again, to save them
    return records


def _remove_stale(directory: Path, records: list[Record]) -> None:
    """After a finished run, the files of its configuration that it did not write: records of an
    earlier run of the same configuration whose staged second stage chose other features, or the
    fits of a run interrupted before; never anything of another configuration (in its own folder)."""
    keep = set()
    for record in records:
        name = record_name(record.features, record.head)
        keep |= {name, name.removesuffix(".json") + ".scores.npz"}
        keep |= {entry["file"] for entry in record.heads or []}
    stale = [p for pattern in ("*__*.json", "*__*.scores.npz", "heads/*__*") for p in directory.glob(pattern)
             if p.name not in keep and not p.name.startswith(".")]
    for path in stale:
        path.unlink()  # unlinking a planted link removes the link, never what it points to
    if stale:
        log.info("removed %d file(s) of an earlier run of this configuration that this run replaced", len(stale))


def _warn_constant_labels(cache: Cache) -> None:
    if not TASKS[cache.task].thresholded:
        return
    train = cache.labels("train")
    constant = M.label_summary(train, train, cache.label_names)["constant_in_train"]
    if constant:
        log.warning("%d of %d labels are never (or always) present in the training split: every head "
                    "predicts them as that constant (%s%s)", len(constant), len(cache.label_names),
                    ", ".join(constant[:10]), ", ..." if len(constant) > 10 else "")


def _write_sweep(directory: Path, records: list[Record], pooling: str, head: str) -> None:
    curve = sorted((r for r in records if r.pooling == pooling and r.head == head
                    and len(r.layers) == 1), key=lambda r: r.layers[0])
    write_json(directory / f"sweep-{pooling}-{head}.json", {
        "pooling": pooling, "head": head,
        "primary_metric": curve[0].primary_metric if curve else None,
        "curve": [{"layer": r.layers[0], "mean": r.metrics[r.primary_metric],
                   "std": r.metrics_std[r.primary_metric]} for r in curve]})


def format_table(records: list[Record], runs_dir=None) -> str:
    """Records -> a fixed-width text table: features x head, the selection score (what a row is
    chosen by, on its selection split), every metric (mean ± std over seeds), the primary one's
    95% bootstrap interval; `*` marks the frozen choice's row, and the footer says by what rule."""
    from featx.runs.choice import frozen_choice, rule_text

    if not records:
        return "(no records)"
    names = list(M.NAMES[records[0].task])
    choice = frozen_choice(records, runs_dir)
    protocol = (choice.record if choice is not None else records[0]).protocol
    # "dev" fits in a column's header; a sentence ("5-fold cv on train") only in the footer.
    split = f" ({protocol['select_on']})" if " " not in protocol["select_on"] else ""
    rows = [["", "features", "head", "protocol", f"select{split}", *names, "95% interval", "train s"]]
    for r in sorted(records, key=lambda r: (r.stage != "probe", bool(r.baseline), r.features, r.head)):
        cells = [metric_text(r.metrics[k]) + spread_text(r.metrics_std[k], r.metrics[k]) for k in names]
        low, high = r.metrics_ci[r.primary_metric] or (float("nan"), float("nan"))
        chosen_by = selection_score(r)  # -inf: none; NaN: undefined on the selection rows
        rows.append(["*" if choice is not None and r is choice.record else "", r.features, r.shown_head,
                     r.protocol["name"], metric_text(chosen_by) if math.isfinite(chosen_by) else "-", *cells,
                     f"[{metric_text(low)}, {metric_text(high)}]", f"{train_seconds(r) or 0:.1f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    first = records[0]
    lines.append(f"(primary metric: {first.primary_metric}, the interval's, on {first.n_eval} "
                 f"{first.protocol['report_on']} rows; select: {first.primary_metric} on {protocol['select_on']}, "
                 "what a row is chosen by)")
    if choice is not None:
        lines.append(f"* the frozen choice, {choice.record.features} {choice.record.shown_head}: {rule_text(choice)}")
    return "\n".join(lines)
