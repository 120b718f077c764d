"""``python -m lakewrap``: the ``lakewrap`` command."""

from lakewrap.cli import main

main(prog_name="lakewrap")
