"""docs/settings.md, generated from the settings model so it cannot drift (a unit test compares them).

Names, types, defaults and limits come from the pydantic model; the meaning of each setting is the
comment written beside (or just above) its field in shared/settings/.

    scripts/dev shell python -m duecast.cli.settings_doc > docs/settings.md
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from ..shared import settings as settings_module
from ..shared.settings import Settings

HEADER = """# Settings

Generated from `shared/settings/` by `python -m duecast.cli.settings_doc`; do not edit by hand.

Every setting can be given in the TOML file named by `--config` or `DUECAST_CONFIG`, or as an
environment variable: `DUECAST_` and the path in capitals, nested with `__` (`[worker]
concurrency = 4` is `DUECAST_WORKER__CONCURRENCY=4`). Lists and tables (`sources`,
`jobs.schedules`, `topics.groups`) are given as JSON in an environment variable. Environment
variables override the file. Everything is checked when a process starts; a bad value stops it
with a message that names the setting and never prints a secret.
"""


def _comments(cls: type[BaseModel]) -> dict[str, str]:
    """field name -> the comment beside it, or the comment lines right above it."""
    source = textwrap.dedent(inspect.getsource(cls))
    cls_node = ast.parse(source).body[0]
    assert isinstance(cls_node, ast.ClassDef)
    text = source.splitlines()
    out: dict[str, str] = {}
    for node in cls_node.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        line = text[node.lineno - 1]
        trailing = _prose(line.split("  # ", 1)[1]) if "  # " in line else ""
        above: list[str] = []
        i = node.lineno - 2
        while i >= 0 and text[i].strip().startswith("#"):
            above.insert(0, _prose(text[i].strip().lstrip("#")))
            i -= 1
        out[node.target.id] = " ".join(s for s in [*above, trailing] if s)
    return out


# A comment for a linter or type checker (noqa with its codes and reason, type: ignore, pragma),
# with everything after it: addressed to tools and their readers, never a setting's description.
_TOOL_NOTE = re.compile(r"(?:^|#)\s*(?:noqa\b|type:\s*ignore\b|pragma:).*$")


def _prose(comment: str) -> str:
    """A source comment as a description: tool notes dropped."""
    return _TOOL_NOTE.sub("", comment).strip().rstrip("#").strip()


def _type(annotation: Any) -> str:
    """A readable type: `one of 'a', 'b'`, `list of str`, `float or none`..."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is Annotated:
        return _type(args[0])
    if origin in (list, tuple):
        return f"list of {_type(args[0])}" if args else "list"
    if origin in (Union, UnionType):
        kinds = [_type(a) for a in args if a is not type(None)]
        return " or ".join(kinds) + (" or none" if type(None) in args else "")
    if annotation is Any:
        return "any JSON"
    return str(getattr(annotation, "__name__", annotation))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if isinstance(value, SecretStr):
        return '`""`' if not value.get_secret_value() else "(secret; see shared/settings/)"
    if isinstance(value, BaseModel):
        return "(section)"
    return f"`{value!r}`" if value not in (None, [], "") else ("none" if value is None else f"`{value!r}`")


def _limits(field: FieldInfo) -> str:
    parts = []
    for m in field.metadata:
        if isinstance(m, Ge):
            parts.append(f">= {m.ge}")
        elif isinstance(m, Gt):
            parts.append(f"> {m.gt}")
        elif isinstance(m, Le):
            parts.append(f"<= {m.le}")
        elif isinstance(m, Lt):
            parts.append(f"< {m.lt}")
        elif isinstance(m, MinLen):
            parts.append(f"at least {m.min_length} item(s)")
        elif isinstance(m, MaxLen):
            parts.append(f"at most {m.max_length}")
        elif getattr(m, "pattern", None):
            parts.append(f"pattern `{m.pattern}`")
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _section(path: str, cls: type[BaseModel], env: bool = True) -> list[str]:
    notes = _comments(cls)
    doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    out = [f"## `{path}`", ""]
    if doc:
        out += [doc, ""]
    out += ["| setting | environment | type | default | limits | meaning |", "|---|---|---|---|---|---|"]
    for name, field in cls.model_fields.items():
        key = f"{path}.{name}" if path else name
        var = f"`DUECAST_{key.upper().replace('.', '__')}`" if env else "(in the list's JSON)"
        meaning = _cell(notes.get(name, ""))
        limits = _cell(_limits(field))
        kind = _cell(_type(field.annotation))
        out.append(f"| `{name}` | {var} | {kind} | {_default(field)} | {limits} | {meaning} |")
    return [*out, ""]


def render() -> str:
    parts = [HEADER]
    nested: list[tuple[str, type[BaseModel], bool]] = []
    top = []
    for name, field in Settings.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            nested.append((name, ann, True))
        else:
            top.append(name)
    parts += ["## Top level", "", "| setting | environment | type | default |", "|---|---|---|---|"]
    for name in top:
        f = Settings.model_fields[name]
        parts.append(f"| `{name}` | `DUECAST_{name.upper()}` | {_type(f.annotation)} | {_default(f)} |")
    parts.append("")
    for name, cls, env in nested:
        parts += _section(name, cls, env)
    # Items of lists: a source, a recurring schedule, a consumer group.
    for label, cls_name in (
        ("sources[]", "SourceSettings"),
        ("jobs.schedules[]", "ScheduleSettings"),
        ("topics.groups[]", "GroupSettings"),
    ):
        item = getattr(settings_module, cls_name, None)
        if isinstance(item, type) and issubclass(item, BaseModel):
            parts += _section(label, item, env=False)
    return "\n".join(parts).rstrip() + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
