"""The imperative shell: workers that run activities, the scheduler that fires timers and expires leases."""
