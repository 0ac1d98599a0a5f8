"""The OpenAI-compatible HTTP frontend: protocol (wire models), serving (logic), app
(routes), server (wiring); run it with ``python -m tandem.frontend --config FILE``."""
