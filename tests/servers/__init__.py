"""Local stand-ins for the APIs skuferry's connectors talk to, one module per system.

Each is written from that vendor's public API documentation (named in the module's
docstring) and serves a generated catalog (``catalog.py``): no third-party data. They run
in-process (``with AkeneoServer(products) as srv:``) or by hand
(``python -m tests.servers.akeneo --port 8781``). ``base.py`` holds the shared plumbing.
"""
