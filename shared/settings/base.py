"""What every settings section shares: frozen, closed to unknown keys, never echoing input in errors,
and the identifier type that is the only way a table or column name enters settings."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from ..identifiers import check_identifier

Identifier = Annotated[str, AfterValidator(check_identifier)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)
