"""ciuic: Python access to a ciuic cluster (files, data loader, checkpoints)."""

from . import _ciuic  # noqa: F401
