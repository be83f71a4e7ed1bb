"""The Redis side: every key and the entry codec, and the queue that pushes, pops and holds entries.

Redis holds only copies of what MySQL already says; nothing here may be the only record of work."""
