"""Benchmarks. Each module is a script: ``python bench/<name>.py --help``."""
