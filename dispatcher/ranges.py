"""RangeKeeper: keeps each range-mode source's ranges table covering every id that holds a row.

Incremental passes look from the highest known span up (new ids); a periodic full pass also
catches rows inserted into spans that were empty before.
"""

from __future__ import annotations

import logging

from ..shared.process.loop import Tick
from ..shared.settings import DispatcherSettings
from ..shared.storage.range_store import RangeStore

log = logging.getLogger("duecast.ranges")


class RangeKeeper:
    name = "range-keeper"

    def __init__(self, stores: list[RangeStore], settings: DispatcherSettings) -> None:
        self.stores = stores
        self.settings = settings
        self._passes = 0

    def tick(self) -> Tick:
        every = max(1, round(self.settings.range_full_scan_s / self.settings.range_discover_s))
        self.discover(full=self._passes % every == 0)
        self._passes += 1
        return Tick(self.settings.range_discover_s, idle=True)

    def discover(self, full: bool) -> int:
        added = 0
        for store in self.stores:
            n = store.discover(full=full)
            if n:
                log.info("%s: %d new range(s) of %d ids", store.src.name, n, store.business.range_size)
            added += n
        return added
