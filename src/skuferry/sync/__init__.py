"""One sync run: map, plan (pure), check-then-create, write."""
