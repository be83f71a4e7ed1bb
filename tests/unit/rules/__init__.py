"""Unit tests (no network) of pure policy, schedules and the handler API."""
