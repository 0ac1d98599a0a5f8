"""The router: pure routing policy (``policy``) and its I/O shell (``service``)."""
