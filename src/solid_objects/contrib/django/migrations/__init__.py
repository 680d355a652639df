"""The Django migration that installs the library's tables on ``migrate``."""

