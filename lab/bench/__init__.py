"""Benchmarks: lockstep side by side with DBOS Transact, on SQLite and PostgreSQL (issue 8).

`python -m lab.bench [--quick] [--backends sqlite,postgresql] [--repeat 3]` (or `make bench`)
writes reports/bench.md and reports/bench.json. DBOS is a benchmark-only dependency (the `bench`
extra); nothing outside this package imports it.
"""
