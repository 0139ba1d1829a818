"""The SQLite state file: schema, mirror, scratch tables, the run lock."""
