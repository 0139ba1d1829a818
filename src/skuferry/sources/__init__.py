"""Source adapters: where the catalog comes from."""

from skuferry.sources.base import Source

__all__ = ["Source"]
