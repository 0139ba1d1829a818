"""Network rules every layer may use: where credentials may go (``origins``), whether a
source path names a remote file (``paths``) and the one retry loop (``retry``). No HTTP
client here; the requests themselves live in the adapters."""
