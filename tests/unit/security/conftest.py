"""A fixed "now" for certificate dates."""

from __future__ import annotations

from datetime import UTC, datetime

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
