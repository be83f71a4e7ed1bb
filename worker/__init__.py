"""The worker role: pops entries from Redis, runs the user's handlers, acks in MySQL with fencing.

Stateless; run any number of processes. Imports `shared` only, never `dispatcher`.
"""
