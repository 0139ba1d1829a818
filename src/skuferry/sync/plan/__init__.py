"""Planning: source records against the mirror become actions. Pure."""
