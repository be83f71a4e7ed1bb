"""Operator-only storage: the actions and reads behind `duecast jobs`, `duecast status`, `duecast web`
and `duecast migrate`. No role imports this package."""
