"""Hooks that connect a real training framework to the mfctl controller (docs/runtime-protocol.md,
"For framework authors"). Each imports its framework lazily: mfctl does not depend on it."""
