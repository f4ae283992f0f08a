"""The example process used by `lockstep demo` and `lockstep serve --example`."""
