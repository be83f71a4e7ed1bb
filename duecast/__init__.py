"""duecast's public API and command line: `from duecast import Registry, Ack`.

Wiring only: the behaviour lives in `shared`, `dispatcher` and `worker`.
"""

from shared.handlers import Ack, Registry, Row

__all__ = ["Ack", "Registry", "Row"]
