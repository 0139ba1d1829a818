"""The operator's page, served by the daemon on ``[daemon] listen`` (``app.Console``)."""
