"""Unit tests (no network) of operations: health, logs, metrics, deploy files and the command line."""
