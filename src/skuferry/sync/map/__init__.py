"""Mapping: a source record becomes a product payload, with its checks."""
