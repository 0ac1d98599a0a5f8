"""The one error ``make images`` and its Python API raise: what failed, and what to run."""


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says why and what to run."""
