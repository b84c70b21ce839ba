"""``python -m control_plane.cli``."""

from control_plane.cli import main

main()
