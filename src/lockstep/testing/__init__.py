"""Helpers for tests, benchmarks and the fault suite: throwaway PostgreSQL clusters, fake clocks."""

from .clock import FakeClock
from .pgcluster import PgCluster, find_pg_bin, pg_dump

__all__ = ["FakeClock", "PgCluster", "find_pg_bin", "pg_dump"]
