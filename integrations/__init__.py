"""Optional integrations with frameworks an application brings (Django's task API...), each behind an
extra (`pip install duecast[django]`). The core never imports them; they use duecast's public API."""

# Installed as `duecast.integrations` (pyproject.toml); loaded bare it would be a second copy.
if __name__ != "duecast.integrations":
    raise ImportError(
        f"integrations/ is part of the duecast package: import duecast.integrations, not {__name__}"
    )
