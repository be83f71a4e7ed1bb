"""The cyclic garbage collector around a role's start-up: paused while the role's modules import and
its settings load, then everything start-up made is frozen (never walked again) and it runs again.

Importing a role makes ~100,000 objects that live as long as the process. Each of the ~130 collections
their allocation sets off walks all of them made so far: about 60 ms of a ~500 ms start-up's CPU, and
after it every full collection walks them again (docs/benchmarks.md, "Cold start"). Only the roles'
entry modules pause it (`python -m duecast.worker`, `-m duecast.dispatcher`): never a library import.
"""

from __future__ import annotations

import gc

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
        gc.enable()


def release() -> None:
    """The collector on again if `pause()` still holds it off, nothing frozen: a command that ended
    before start_process (--help, a bad argument, a start-up error), perhaps in a test's process."""
    if _paused:
        _paused.clear()
        gc.enable()
