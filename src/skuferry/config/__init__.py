"""Configuration: the TOML file's shape, its loading with the environment, every problem at once."""
