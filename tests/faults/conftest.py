"""The fault-injection suite: SIGKILL at random moments, a full disk, two writers on one cache.

`make faults` runs it in full (FEATX_FAULTS=full: 20 kills, five races of two writers);
`make test` runs the quick subset (3 kills, one race). The figures these tests and the generated
tests elsewhere count (tests/generated.py) are printed at the end of a run that includes this
folder, and written to data/faults/summary.json.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests.generated import FIGURES, FULL


def pytest_terminal_summary(terminalreporter):
    kills = FIGURES["kills"]
    if not (kills or FIGURES["bad_inputs"] or FIGURES["checks"]):
        return
    write = terminalreporter.write_line
    write("")
    write(f"fault-injection figures ({'full' if FULL else 'quick'} run)")
    outcomes = {k: len([r for r in terminalreporter.stats.get(k, [])
                        if k == "skipped" or getattr(r, "when", "call") == "call"])
                for k in ("passed", "failed", "skipped")}
    write(f"  scenarios (tests) passed / run: {outcomes['passed']} / {outcomes['passed'] + outcomes['failed']}"
          f" ({outcomes['skipped']} skipped)")
    if kills:
        survived = sum(k["survived"] for k in kills)
        recomputed = [k["recomputed"] for k in kills if k["recomputed"] is not None]
        write(f"  kills survived / tried: {survived} / {len(kills)}")
        write(f"  where the kills landed: {dict(Counter(k['stage'] for k in kills))}")
        if recomputed:
            write(f"  rows recomputed per kill: max {max(recomputed)}, mean {sum(recomputed) / len(recomputed):.1f} "
                  f"(bound: flush_rows + one batch = {kills[0]['bound']})")
    if FIGURES["bad_inputs"]:
        total = sum(FIGURES["bad_inputs"].values())
        write(f"  generated bad inputs: {total}; unhandled exceptions: {len(FIGURES['unhandled'])}; "
              f"silent wrong results: {len(FIGURES['silent'])}")
        for category, count in sorted(FIGURES["bad_inputs"].items()):
            write(f"    {category}: {count}")
    for name, count in sorted(FIGURES["checks"].items()):
        write(f"  {name}: {count}")
    out = Path("data") / "faults"
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(
        {"full": FULL, "scenarios": outcomes, "kills": kills, "bad_inputs": FIGURES["bad_inputs"],
         "unhandled": FIGURES["unhandled"], "silent": FIGURES["silent"], "checks": FIGURES["checks"]},
        indent=1, default=str))
