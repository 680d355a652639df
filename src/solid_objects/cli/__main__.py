"""``python -m solid_objects.cli`` runs the command line too."""

from .main import main

main()
