"""Around the runs: daemon, schedule, hooks, metrics, monitor pings, reports."""
