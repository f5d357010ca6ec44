"""The cache's lock, partial and scratch files replaced by links to a file outside: extraction
never writes through one (it removes a link at a scratch name, or refuses with the link named)."""
from __future__ import annotations

import os
import threading

import pytest

from featx.cache.extract import extract
from featx.errors import FeatxError
from tests.finished_project import make, victim
from tests.generated import FIGURES


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo"])
@pytest.mark.parametrize("planted", ["lock", "init", "reserve", "write-test", "partial"])
def test_cache_files_replaced_by_links_are_not_followed(built, tmp_path, planted, kind):
    # A link of either kind, or a FIFO, where featx keeps a file of its own: removed (a scratch
    # name) or refused with the path named; never written through, never waited on.
    pipeline = make(built, tmp_path / "data", probe={})
    from featx.cache.plan import make_plan

    path = make_plan(pipeline).cache_path("float32")
    path.parent.mkdir(parents=True)
    target = victim(tmp_path)
    name = {"lock": f".{path.name}.lock", "init": f"{path.name}.partial.init", "partial": f"{path.name}.partial",
            "reserve": f".featx-reserve-{os.getpid()}-{threading.get_ident()}", "write-test": f".featx-write-test-{os.getpid()}"}[planted]
    at = path.parent / name
    {"symlink": lambda: at.symlink_to(target), "hardlink": lambda: os.link(target, at),
     "fifo": lambda: os.mkfifo(at)}[kind]()
    try:
        extract(pipeline)  # a link at a scratch name is removed, never written through
    except FeatxError as exc:
        assert str(at) in str(exc) and ("link" in str(exc) or "FIFO" in str(exc))
        FIGURES["checks"]["cache links refused"] += 1
    assert target.read_text() == "the user's own file\n"
