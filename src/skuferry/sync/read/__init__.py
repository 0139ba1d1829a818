"""Reading and shaping records: the pull, pieces, joins, where, named keys, incremental."""
