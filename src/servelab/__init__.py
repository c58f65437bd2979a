"""servelab: find the best way to serve an LLM by measurement."""

__version__ = "0.1.0"
