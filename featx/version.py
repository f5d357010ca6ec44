"""featx's version, in a module of its own: every layer can read it without importing the package."""
__version__ = "0.2.0"
