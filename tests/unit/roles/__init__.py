"""Unit tests (no network) of the roles' loops and decisions."""
