"""Benchmark scripts, run as files (python benchmarks/<name>.py); a package so they share gpu.py."""
