"""Writing: check-then-create, updates, lanes, settling, the walk of the CMS and what is gone."""
