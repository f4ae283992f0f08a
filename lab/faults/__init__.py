"""Fault-injection suite: real processes, injected faults, a history checker."""
