"""`python -m bench [name ...]`: run the named benchmarks (default: all)."""
from __future__ import annotations

import importlib
import logging
import sys

BENCHMARKS = ("extraction", "process", "levers", "probe", "heads", "predict", "finetune", "busy", "dtype", "scale",
              "gpu", "convergence")
# Not in the default run: gpu (on a CUDA machine, via bench/gpu_check.sh); dtype (the measurement
# behind extract.dtype = "auto", about 10 minutes); scale (2M and 10M rows, about half an hour on
# 2 cores; FEATX_SCALE_ROWS picks smaller sizes); convergence (the default fine-tune against twice
# its epochs on three pipelines, about an hour).
DEFAULT = ("extraction", "process", "levers", "probe", "heads", "predict", "finetune", "busy")


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="featx: %(message)s")
    names = argv or list(DEFAULT)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}", file=sys.stderr)
        return 2
    for name in names:
        print(f"\n== bench {name} ==")
        importlib.import_module(f"bench.{name}").run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
