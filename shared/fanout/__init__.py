"""The Redis side, behind the Queue port (protocol.py): every key (keys.py), the client and the
translation of redis-py's errors into duecast's (client.py), and the queue that pushes, pops and holds
entries (queue.py). Only this package and wiring import redis.

Redis holds only copies of what MySQL already says; nothing here may be the only record of work."""
