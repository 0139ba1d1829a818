"""Source adapters: where the catalog comes from."""

from skuferry.sources.base import Source, open_source, register

__all__ = ["Source", "open_source", "register"]
