"""Loading the user's app (`--app package.module[:attribute]`, worker.app, dispatcher.app) into its
Registry. A module that cannot be imported or holds no Registry is an AppError naming the module and
the cause in one line (a file:line for a SyntaxError): the user's mistake, never reported as a bug.
"""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import traceback
from types import ModuleType

from ..errors import DuecastError
from .handlers import Registry

DEFAULT_ATTRIBUTE = "handlers"  # picked when a module holds several Registries and none is named


class AppError(DuecastError, ValueError):
    """The handler app named by --app / worker.app cannot be loaded; the message says why."""


def load_registry(spec: str) -> Registry:
    """Import "package.module[:attribute]" and return its Registry; several specs, comma-separated,
    give one Registry holding all of theirs (Registry.include).

    Without an attribute: the module's one Registry whatever its name (`tasks = Registry()` as in the
    docs), or, when it holds several, the one named `handlers`. The current directory is importable,
    as with `python -m duecast.worker`, so `duecast worker --app myapp.handlers` finds a project's own
    modules.
    """
    specs = [s.strip() for s in spec.split(",") if s.strip()]
    if len(specs) > 1:
        combined = Registry()
        for one in specs:
            try:
                combined.include(load_registry(one))
            except ValueError as exc:
                raise AppError(f"--app {', '.join(specs)}: {exc}") from exc
        return combined
    module_name, _, attr = spec.strip().partition(":")
    return registry_in(import_app(module_name), spec.strip(), attr)


def import_app(module_name: str) -> ModuleType:
    """The user's module, imported; whatever its import raised as one AppError line."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except SyntaxError as exc:
        where = f"{exc.filename}:{exc.lineno}" if exc.filename else f"line {exc.lineno}"
        raise AppError(f"the app module {module_name!r} has a syntax error at {where}: {exc.msg}") from exc
    except ImportError as exc:
        raise AppError(f"cannot import the app module {module_name!r}: {exc}") from exc
    except Exception as exc:
        # The module's own code raised while importing: the user's bug, named where it happened.
        where = _users_frame(exc)
        said = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise AppError(f"importing the app module {module_name!r} raised {said}{where}") from exc


def _users_frame(exc: BaseException) -> str:
    """` at file:line` of the deepest frame in the user's code (not the import machinery's, not the
    standard library's, which raised on its behalf: `os.environ[...]`), or ""."""
    stdlib = sysconfig.get_paths()["stdlib"]
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if not f.filename.startswith(("<", stdlib))] or frames
    return f" at {own[-1].filename}:{own[-1].lineno}" if own else ""


def registry_in(module: ModuleType, spec: str, attr: str) -> Registry:
    found = {name: value for name, value in vars(module).items() if isinstance(value, Registry)}
    names = ", ".join(sorted(found)) or "none"
    if attr:
        registry = found.get(attr)
        if registry is None:
            raise AppError(
                f"{spec}: expected a duecast Registry at {module.__name__}:{attr} "
                f"(Registries in {module.__name__}: {names})"
            )
        return registry
    distinct = {id(value) for value in found.values()}
    if len(distinct) == 1:
        return next(iter(found.values()))
    if DEFAULT_ATTRIBUTE in found:
        return found[DEFAULT_ATTRIBUTE]
    if not found:
        raise AppError(
            f"{spec}: the module holds no duecast Registry; create one (`tasks = Registry()`) "
            "or name it: --app module:attribute"
        )
    raise AppError(
        f"{spec}: the module holds several Registries ({names}); name one: --app "
        f"{module.__name__}:{sorted(found)[0]}"
    )
