"""Example handler modules; `block_check` is the one the demo runs."""
