"""The dispatcher role: claims due rows in MySQL, then fans their entries out to Redis; hosts the sweeper.

Imports `shared` only, never `worker`.
"""

# The repository's top-level dispatcher/ is installed as `duecast.dispatcher` (pyproject.toml, package-dir).
# Loaded bare from a checkout it would be a second copy of every module, with its own classes.
if __name__ != "duecast.dispatcher":
    raise ImportError(f"dispatcher/ is part of the duecast package: import duecast.dispatcher,"
                      f" not {__name__}")
