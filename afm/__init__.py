"""afm: Agent Foundation Models toolkit."""

__version__ = "0.1.0"
