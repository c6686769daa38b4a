"""Benchmarks: this framework's throughput as ratios to the limit measured in the same run.

Each module runs on its own (`python benchmarks/<name>.py`, or `python -m
benchmarks.<name>`) and prints one JSON object; `benchmarks/run_all.py` runs
them all, prints a table and writes the JSON. Not part of the test suite.
"""
