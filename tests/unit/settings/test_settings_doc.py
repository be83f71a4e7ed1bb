"""docs/settings.md is exactly what the settings model generates: no setting undocumented, none stale."""

from pathlib import Path

from pydantic import BaseModel

from duecast.cli.settings_doc import _comments, render
from duecast.shared.settings import Settings

DOC = Path(__file__).resolve().parents[3] / "docs" / "settings.md"


def test_docs_settings_md_is_generated_from_the_model() -> None:
    assert DOC.read_text() == render(), "regenerate: python -m duecast.cli.settings_doc > docs/settings.md"


def test_every_section_and_field_appears() -> None:
    text = render()
    for section, field in Settings.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            for name in annotation.model_fields:
                assert f"`DUECAST_{section.upper()}__{name.upper()}`" in text


class _Commented(BaseModel):
    # Where probes connect.
    host: str = "0.0.0.0"  # noqa: S104 - probes and scrapers must reach it
    port: int = 9000  # the port  # type: ignore[assignment]
    # pragma: no cover
    name: str = "x"  # pragma: no cover


def test_tool_notes_are_never_a_description() -> None:
    """A `# noqa: ...` (with its reason), `# type: ignore` or `# pragma:` comment is for tools."""
    assert _comments(_Commented) == {"host": "Where probes connect.", "port": "the port", "name": ""}
    assert "noqa" not in render()
