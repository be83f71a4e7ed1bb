"""docs/settings.md is exactly what the settings model generates: no setting undocumented, none stale."""

from pathlib import Path

from duecast.settings_doc import render
from duecast.shared.settings import Settings

DOC = Path(__file__).resolve().parents[3] / "docs" / "settings.md"


def test_docs_settings_md_is_generated_from_the_model() -> None:
    assert DOC.read_text() == render(), "regenerate: python -m duecast.settings_doc > docs/settings.md"


def test_every_section_and_field_appears() -> None:
    text = render()
    for section, field in Settings.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            for name in annotation.model_fields:
                assert f"`DUECAST_{section.upper()}__{name.upper()}`" in text
