"""`make screenshots`: the pictures of docs/ui.md, taken from a real `lockstep serve --example`."""
