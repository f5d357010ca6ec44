"""Probe cost against the backbone: the default `make probe` grid and the logistic head alone,
beside one backbone pass over the same data (the built-in TREC pipeline), in one run."""
from __future__ import annotations

import tempfile
import time
from dataclasses import replace

from bench.common import machine, save, table
from featx.config import load_pipeline


def run() -> dict:
    from featx.cache import Cache
    from featx.extract import extract
    from featx.probe import Features, probe_one, run_probe

    with tempfile.TemporaryDirectory(dir="data") as scratch:
        pipeline = replace(load_pipeline("pipelines/trec.toml"), data_dir=scratch, progress=False)
        start = time.perf_counter()
        result = extract(pipeline)  # a fresh cache: one full backbone pass
        extract_wall = time.perf_counter() - start
        forward = result.stats["seconds"]

        start = time.perf_counter()
        records = run_probe(pipeline)
        grid = time.perf_counter() - start

        with Cache(result.path) as cache:
            last = cache.meta["n_layers"]
        start = time.perf_counter()
        logistic, _ = probe_one(result.path, Features("mean", (last,)), "logistic", pipeline.probe)
        alone = time.perf_counter() - start

    rows = [["backbone pass (extract, forward loop)", forward, 1.0],
            ["extract, wall (load + forward + write)", extract_wall, extract_wall / forward],
            [f"probe grid ({len(records)} fits, make probe)", grid, grid / forward],
            ["logistic head alone (mean, last layer)", alone, alone / forward]]
    print(table(rows, ["built-in TREC, 5,381 texts", "seconds", "x backbone pass"]))
    print(f"logistic on mean@{last}: {logistic['metrics']['accuracy']:.4f} accuracy "
          f"(C={logistic['hyperparameters']['C']})")
    out = {"machine": machine(), "backbone_pass_s": forward, "extract_wall_s": extract_wall,
           "probe_grid_s": grid, "probe_grid_fits": len(records), "logistic_alone_s": alone,
           "ratio_grid_to_backbone": grid / forward, "ratio_logistic_to_backbone": alone / forward}
    print(f"written to {save('probe', out)}")
    return out
