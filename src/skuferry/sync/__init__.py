"""One sync run, in stages: read, map, plan (pure), write; the engine composes them."""
