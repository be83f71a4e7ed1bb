"""Integration tests of what the docs promise: the example app, run as its README says, and every
code block of README.md and docs/."""
