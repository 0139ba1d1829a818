"""skuferry's benchmarks: ``python -m bench`` (see bench/README.md). Never run by the tests."""
