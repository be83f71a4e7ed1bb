"""Process plumbing every role shares: the loop, start-up wiring, logging, health endpoints and metrics."""
