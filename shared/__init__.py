"""duecast's shared core: settings, the SQL and the store that runs it, Redis keys and queue, the loop.

Imported by `dispatcher/` and `worker/`; it must never import either of them.
"""

# The repository's top-level shared/ is installed as `duecast.shared` (pyproject.toml, package-dir).
# Loaded bare from a checkout it would be a second copy of every module, with its own classes.
if __name__ != "duecast.shared":
    raise ImportError(f"shared/ is part of the duecast package: import duecast.shared, not {__name__}")
