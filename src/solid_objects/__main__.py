"""``python -m solid_objects`` runs the command line."""

from .cli import main

main()
