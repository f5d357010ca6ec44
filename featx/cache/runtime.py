"""The process-wide settings an extraction runs under, in one place (`runtime`): torch's threads
(one per core; for a narrow model, forward passes side by side on threads of one torch thread
each), the tokenizers library's own pool off (featx sizes the tokenizer's threads itself,
`tokenizer_threads`), fewer garbage collections, and freed heap pages handed back to the OS.
Each setting is applied by the first extraction of the process to start and put back by the
last to end (threads may extract side by side). Also the two ways extraction runs work on
threads: an iterator in the background (`in_background`) and work in order on a pool (`in_order`).
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import gc
import logging
import os
import queue
import threading
import time

import torch

from featx.cpus import available

log = logging.getLogger("featx")

# A narrow model's matrix products are too small to share between threads, and its tokenizer
# needs a core as much as the model does: its threads wait on each other, and on the tokenizer
# thread, at every operation. Below this width, forward passes run side by side on threads of
# one torch thread each.
SMALL_HIDDEN = 128


@contextlib.contextmanager
def runtime(device: torch.device, hidden: int, threads_asked: int):
    """The settings an extraction runs under; yields how many forward passes run side by side.
    `threads_asked`: extract.threads (0: one per core)."""
    own = torch.get_num_threads()  # this thread's, put back after
    # `threads`: the count before any extraction in this process changed it (a thread started
    # while another extraction had set 1 would otherwise inherit 1).
    with torch_threads() as threads:
        try:
            workers = _set_threads(device, hidden, threads_asked, threads)
            with own_tokenizer_threads(), fewer_collections():
                yield workers
        finally:
            torch.set_num_threads(own)


def _set_threads(device: torch.device, hidden: int, asked: int, threads: int) -> int:
    """Set torch's threads for this extraction; the number of forward passes side by side."""
    if asked:
        if asked > available():
            log.warning("extract.threads = %d is more than the %d CPUs this process may use: torch runs slower "
                        "with more threads than cores (0 uses one per core)", asked, available())
        torch.set_num_threads(asked)
        return 1
    if device.type == "cpu" and hidden < SMALL_HIDDEN and threads > 1:
        # The operations release the GIL: passes on their own threads share the cores without
        # waiting on each other at every operation.
        torch.set_num_threads(1)
        return threads
    torch.set_num_threads(threads)
    return 1


def tokenizer_threads(device: torch.device) -> tuple[int, int]:
    """(threads for the first window, threads for the others): every core while the model
    waits for the first window, then the cores the model's threads leave (one at least; a GPU's
    model needs one core to feed it)."""
    cores = available()
    model = torch.get_num_threads() if device.type == "cpu" else 1
    return cores, max(1, cores - model)


class _WhileExtracting:
    """A process-wide setting held while any extraction in this process runs: applied by the
    first to start, put back as it was by the last to end (threads may extract side by side)."""

    def __init__(self, apply, restore):
        self._apply, self._restore = apply, restore
        self._lock = threading.Lock()
        self._users, self._saved = 0, None

    @contextlib.contextmanager
    def held(self):
        """Yields the setting as it was before the first extraction applied it."""
        with self._lock:
            if self._users == 0:
                self._saved = self._apply()
            self._users += 1
            saved = self._saved
        try:
            yield saved
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    self._restore(self._saved)


PARALLELISM = "TOKENIZERS_PARALLELISM"


def _parallelism_off():
    saved = os.environ.get(PARALLELISM)
    os.environ[PARALLELISM] = "false"
    return saved


def _parallelism_back(saved):
    if saved is None:
        os.environ.pop(PARALLELISM, None)
    else:
        os.environ[PARALLELISM] = saved


# The tokenizers library's own thread pool off while extraction runs: featx sizes the
# tokenizer's threads itself (`tokenizer_threads`). The library's pool takes every core whenever
# it tokenises, beside the model's threads. The library reads the variable at each call.
own_tokenizer_threads = _WhileExtracting(_parallelism_off, _parallelism_back).held

# Objects a collection of the young generation sees: a tokenised chunk's id lists (16,384 of
# them, alive until flattened) outlive the default 700 and would be promoted, so full
# collections would walk every object of torch and transformers, on both threads under the GIL.
YOUNG_OBJECTS = 50_000


def _fewer_collections():
    threshold = gc.get_threshold()
    # What exists before the pass (modules, the model) is never walked again; unless the caller
    # froze objects itself (unfreeze would thaw those too), then its choice stands.
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, *threshold[1:])
    return threshold, freeze


def _collections_back(saved):
    threshold, froze = saved
    gc.set_threshold(*threshold)
    if froze:
        gc.unfreeze()


fewer_collections = _WhileExtracting(_fewer_collections, _collections_back).held
# torch's thread count, read by the first extraction to start and put back by the last to end:
# new threads take the count last set anywhere in the process (each run's own thread gets its
# own back, `run`).
torch_threads = _WhileExtracting(torch.get_num_threads, torch.set_num_threads).held


def _glibc():
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _glibc()
TRIM_EVERY = 16  # batches: keeps peak RSS flat at a small cost in time (bench/HISTORY.md, Extraction)


def release_free_memory() -> None:
    """Hand freed heap pages back to the OS (glibc). Batches of ever-changing shapes fragment
    the heap; without this, peak RSS creeps up with the number of batches, not their size."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def in_background(iterable, maxsize: int = 4, *, handoff: bool = False):
    """Run an iterator in a thread, `maxsize` items ahead; re-raise its errors here.
    `handoff`: the thread computes the next item only once this one has been taken, so at most
    two are held (the one in use here and the next), whatever their size.

    Yields (item, seconds this thread waited for it): the wait is time the model sat idle.
    """
    items: queue.Queue = queue.Queue(maxsize)
    taken = threading.Semaphore(0)
    done = object()
    stop = threading.Event()

    def produce():
        try:
            for item in iterable:
                if stop.is_set():
                    return
                items.put(item)
                while handoff and not taken.acquire(timeout=0.1):
                    if stop.is_set():
                        return
            items.put(done)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            items.put(exc)

    thread = threading.Thread(target=produce, daemon=True, name="featx-tokenize")
    thread.start()
    try:
        while True:
            t = time.perf_counter()
            item = items.get()
            waited = time.perf_counter() - t
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            if handoff:
                taken.release()  # the thread may compute the next item now
            yield item, waited
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer stuck on a full queue
            try:
                items.get_nowait()
            except queue.Empty:
                thread.join(0.05)


def in_order(items, compute, pool=None, in_flight: int = 1):
    """(item, compute(item)) for each item, in order: computed here, or by `pool`'s threads
    with up to `in_flight` items submitted and not yet taken (what they hold bounds the memory)."""
    if pool is None:
        for item in items:
            yield item, compute(item)
        return
    pending: collections.deque = collections.deque()
    try:
        for item in items:
            pending.append((item, pool.submit(compute, item)))
            if len(pending) >= in_flight:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()
    finally:
        for _, future in pending:  # an error, or the consumer stopped: nothing left running
            future.cancel()
        # Their errors are nobody's now, but an interrupt while waiting (Ctrl-C, SIGTERM) is.
        concurrent.futures.wait([future for _, future in pending])
