"""Fault tests (real processes, signals, restarts) of crashed, killed and stopped processes."""
