"""Maintainer command-line tools (`python -m build_tools.regen`, ...). Not shipped in the wheel."""
