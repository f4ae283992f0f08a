"""`make soak`: a long, steady, mixed load on PostgreSQL with two servers, two schedulers and three
workers, while a seeded fault schedule injects every fault kind of the suite at random; the fault
suite's checker judges the whole history at the end (and every few minutes on the way). Writes
reports/soak.md and reports/soak.json.

The modules: cluster.py (the processes and the supervisor that restarts what died), load.py (the
clients starting runs and the approvers deciding them), chaos.py (the fault schedule), sample.py (per
minute: latency, RSS and open files of every process, database size), report.py, soak.py (the whole
thing, start to verdict).
"""
