"""Runs on the cluster as the job's entrypoint (`python -m orchestrator.runtime`).

The resolved training configuration (docs/design.md) arrives as JSON in the environment variable
ORCHESTRATE_EXPERIMENT. This package is the only code that builds Ray trainers.
"""
