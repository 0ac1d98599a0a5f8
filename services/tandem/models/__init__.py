"""Model artifacts: where a model's files come from on this machine (pure lookups)."""

from tandem.models.source import ModelSourceError, resolve_local_model_file

__all__ = ["ModelSourceError", "resolve_local_model_file"]
