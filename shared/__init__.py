"""duecast's shared core: settings, the SQL and the store that runs it, Redis keys and queue, the loop.

Imported by `dispatcher/` and `worker/`; it must never import either of them.
"""
