"""Pure network rules every layer may use: where credentials may go (``origins``) and how
long to wait before a retry (``retry``). No I/O here; the HTTP code lives in the adapters."""
