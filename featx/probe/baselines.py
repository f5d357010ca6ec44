"""The baseline store: the baselines' records, predictions and heads kept per data, so a probe
of the same data and settings reuses them instead of fitting them again. Fitting them is the
probe's (featx/probe/job.py); the store only keeps and rebinds what was fitted. Never touches torch.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

from featx.heads import registry as H
from featx.cache.reader import Cache
from featx.config.pipeline import ProbeConfig
from featx.errors import FeatxError
from featx.files import utc_now, writable_dir, write_bytes
from featx.runs.schema import Record
from featx.runs.records import Predictions, cache_facts, probe_config_hash, read_predictions, read_records, write_record
from featx.runs.headfiles import head_binding, load_head, save_heads
from featx.version import __version__

log = logging.getLogger("featx")


class Baselines:
    """The baselines' records kept per data, so a probe of the same data (another model,
    pooling or head grid) reuses them instead of fitting them again: they read the texts and
    labels, never the backbone's vectors. A stored baseline is reused only when the data
    fingerprint, the baseline's settings (its estimator's every parameter, its grid, the probe's
    protocol, folds, seeds and metric) and the featx and scikit-learn versions are all the
    ones it was fitted under; its record then says `reused` (when and for which cache it was
    fitted), and its heads are rebound to the new record. Anything unreadable is fitted again.

        <data_dir>/baselines/<key[:16]>/text__<head>.json (+ .scores.npz), heads/
    """

    def __init__(self, root: Path, data_dir: Path, cache_path: Path, cfg: ProbeConfig, pipeline: str):
        self.root, self.data_dir, self.cache_path, self.cfg, self.pipeline = root, data_dir, cache_path, cfg, pipeline
        with Cache(cache_path) as cache:
            self.task, self.fingerprint = cache.task, cache.meta["dataset_fingerprint"]
        self.reused: dict[str, Record] = {}

    def folder(self, head: str) -> Path:
        import sklearn

        spec = H.HEADS[head]
        estimator = H.build(head, self.task, spec.grid(self.task)[0])
        settings = {"data": self.fingerprint, "head": head, "grid": spec.grid(self.task),
                    "estimator": estimator.get_params(deep=True),
                    "features": spec.prepare().get_params() if spec.prepare else None,
                    "probe": {k: getattr(self.cfg, k) for k in ("protocol", "folds", "cv_max_rows", "seeds", "metric")},
                    "versions": [__version__, sklearn.__version__]}
        key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=repr).encode()).hexdigest()
        return self.root / key[:16]

    def reuse(self, head: str, directory: Path, heads_dir: Path | None, settings: dict) -> bool:
        """Whether `head`'s stored record was written into `directory` (kept in `self.reused`)."""
        folder = self.folder(head)
        with Cache(self.cache_path) as cache:  # what each head is bound to beside its record
            made = {"label_names": list(cache.label_names), "text_pair": bool(cache.meta.get("text_pair"))}
        try:
            stored = [r for r in read_records(folder) if r.head == head] if folder.is_dir() else []
            if not stored or (heads_dir is not None and not stored[0].heads):
                return False
            old = stored[0]
            predictions = read_predictions(folder, old)
            fitted = [(e["seed"], load_head(folder / "heads" / e["file"], sha256=e["sha256"],
                                            binding=head_binding(old, e["seed"], **made)))
                      for e in (old.heads if heads_dir is not None else [])]
        except (FeatxError, OSError, ValueError) as exc:
            log.info("%s: the stored baseline cannot be reused (%s); fitting it again", head, exc)
            return False
        with Cache(self.cache_path) as cache:
            record = dataclasses.replace(
                old, pipeline=self.pipeline, config_hash=probe_config_hash(self.cfg), cache_key=cache.key,
                init=cache.meta.get("init"), cache_bytes=self.cache_path.stat().st_size,
                created=utc_now("microseconds"), configuration=settings, **cache_facts(cache.meta),
                reused={"created": old.created, "pipeline": old.pipeline, "cache_key": old.cache_key})
        record = dataclasses.replace(record, heads=None if heads_dir is None else save_heads(heads_dir, record, fitted, **made))
        # write_record names the predictions written beside it (the stored ones are the store's).
        self.reused[head] = write_record(directory, record, predictions)
        log.info("%s: the same data and settings were fitted on %s; that baseline is reused", head,
                 old.created)
        return True

    def keep(self, record: Record, predictions: Predictions, heads_dir: Path | None) -> None:
        """Store a freshly fitted baseline (its record, predictions and heads) for later probes."""
        folder = writable_dir(self.folder(record.head), root=self.data_dir)
        for entry in record.heads or []:  # None: probe.save_heads = false
            write_bytes(folder / "heads" / entry["file"], (heads_dir / entry["file"]).read_bytes())
        write_record(folder, record, predictions)
