"""Embedded defaults for offline runs: a tiny Qwen2-architecture model and demo CoA data, built locally."""
