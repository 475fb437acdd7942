"""The package version: a leaf every layer may read (checkpoints record it)."""

__version__ = "0.1.0"
