"""Fallback for run.sh: servelab's own entry point (servelab.cli.main) with only the command
modules that exist in the tree; used only when .venv/bin/servelab cannot start."""
import importlib.util, sys
import servelab.cli as c
c._COMMAND_MODULES = tuple(m for m in c._COMMAND_MODULES if importlib.util.find_spec(m) is not None)
c.main()
