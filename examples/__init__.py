"""Example handler modules, installed as `duecast.examples`; `block_check` is the one the demo runs.
They import the public API by name, as an application does. (blockcheck/ is an application to copy.)
"""

# Installed as `duecast.examples` (pyproject.toml, package-dir); not to be loaded twice under a bare name.
if __name__ != "duecast.examples":
    raise ImportError(f"examples/ is part of the duecast package: import duecast.examples, not {__name__}")
