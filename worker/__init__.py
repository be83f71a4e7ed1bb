"""The worker role: pops entries from Redis, runs the user's handlers, acks in MySQL with fencing.

Stateless; run any number of processes. Imports `shared` only, never `dispatcher`.
"""

# The repository's top-level worker/ is installed as `duecast.worker` (pyproject.toml, package-dir).
# Loaded bare from a checkout it would be a second copy of every module, with its own classes.
if __name__ != "duecast.worker":
    raise ImportError(f"worker/ is part of the duecast package: import duecast.worker, not {__name__}")
