"""The cyclic garbage collector of a role's process: paused while the role's modules import and its
settings load, then everything start-up made is frozen (never walked again), and it runs again with
a young generation of YOUNG_OBJECTS.

Importing a role makes ~100,000 objects that live as long as the process. Each of the ~130 collections
their allocation sets off walks all of them made so far: about 60 ms of a ~500 ms start-up's CPU, and
after it every full collection walks them again (docs/benchmarks.md, "Cold start"). Only the roles'
entry modules pause it (`python -m duecast.worker`, `-m duecast.dispatcher`): never a library import.
"""

from __future__ import annotations

import gc

# A young collection is set off when the container objects made since the last one, less those
# freed (old ones included), pass this count. Python's default, 700, fired every few hundred objects
# of a worker's batches, which keep thousands of objects alive for a whole call (a check awaiting
# 20 ms: its task, coroutine, future and outcome): 17.8 -> 10.3 µs an async check at 10,000
# (bench/range_path.py). At 10,000 it still fired ~20 times a second in each worker of a 1M-user
# re-scan: a batch makes and frees thousands at once, so the count swings past 10,000 and back; each
# collection walked the 10,000-25,000 young objects of the checks in flight and found no garbage
# (0 in ~900), 5-10 s of a worker's 45 (docs/benchmarks.md, "The young collections"). A swing
# past 100,000 comes a few times a minute. What it costs: cyclic garbage waits for up to this many
# new objects (a few tens of MB of small ones), and a collection that comes walks a longer list.
YOUNG_OBJECTS = 100_000

_paused: list[bool] = []  # one item while this module holds the collector off


def pause() -> None:
    """Collector off until `resume()`; the first statement of a role's entry module."""
    if gc.isenabled() and not _paused:
        gc.disable()
        _paused.append(True)


def resume() -> None:
    """Freeze what exists (the modules, the settings: kept for the process's life; the few cycles
    that imports left as garbage stay too) and turn the collector on again. A no-op unless `pause()`
    turned it off: a test or an embedding process that imports a role keeps its own collector."""
    if _paused:
        _paused.clear()
        gc.freeze()
        young, middle, old = gc.get_threshold()
        gc.set_threshold(max(YOUNG_OBJECTS, young), middle, old)  # never lower than the process's
        gc.enable()


def release() -> None:
    """The collector on again if `pause()` still holds it off, nothing frozen: a command that ended
    before start_process (--help, a bad argument, a start-up error), perhaps in a test's process."""
    if _paused:
        _paused.clear()
        gc.enable()
