"""The behaviour, written once as synchronous code: callers' side, workers, turns.

Nothing here is imported by applications; the faces (``runtime/``, ``ref.py``)
are the public way in. ``docs/architecture.md`` draws the modules.
"""
