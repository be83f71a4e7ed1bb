"""Fault tests (real processes, signals, restarts) of servers going away, restarting or never answering."""
