from .api import LaunchConfig, elastic_launch, launch_agent

# ruff: noqa: F401 (re-exports, as in real torch)
