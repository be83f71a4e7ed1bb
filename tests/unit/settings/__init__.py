"""Unit tests (no network) of the settings model and its documentation."""
