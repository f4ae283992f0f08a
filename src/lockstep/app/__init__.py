"""The application layer: the kernel every command goes through and the services built on it."""
