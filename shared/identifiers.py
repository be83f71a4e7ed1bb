"""SQL identifier validation: the only way a table or column name reaches SQL text.

Names are allow-listed by pattern here and checked against information_schema by the schema module.
"""

import re

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def check_identifier(name: str) -> str:
    """Return `name` if it is a plain identifier (letters, digits, _; max 64), else raise ValueError."""
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise ValueError(
            f"{name!r} is not an allowed SQL identifier: use 1-64 characters of A-Z, a-z, 0-9 "
            "and _, not starting with a digit"
        )
    return name


def quote(name: str) -> str:
    """Backquote a validated identifier for MySQL."""
    return f"`{check_identifier(name)}`"
