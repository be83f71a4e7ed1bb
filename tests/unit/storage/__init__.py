"""Unit tests (no network) of SQL rendering, keys and the store and queue fakes."""
