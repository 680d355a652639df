"""The ``solid-objects`` command line (``solid_objects.cli:main``, ``python -m solid_objects``)."""

from .common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, cli_principal, load_runtime
from .main import main

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "cli_principal", "load_runtime", "main"]
