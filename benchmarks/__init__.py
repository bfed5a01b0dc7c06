"""Side-by-side speed and memory of attnmm against its peers; run ``python -m benchmarks``."""
