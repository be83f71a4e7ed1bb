"""Unit tests of the deploy files: compose, Kubernetes, the Dockerfile and the command lines they run."""
