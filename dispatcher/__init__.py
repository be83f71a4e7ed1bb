"""The dispatcher role: claims due rows in MySQL, then fans their entries out to Redis; hosts the sweeper.

Imports `shared` only, never `worker`.
"""
