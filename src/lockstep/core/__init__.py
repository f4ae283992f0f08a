"""The pure core of lockstep: definitions, expressions, events, state, decide/evolve.

Nothing in this package performs I/O, reads a clock, draws randomness or logs: everything it needs is
passed in, so the same inputs always give the same events (which is what makes replay trustworthy).
"""
