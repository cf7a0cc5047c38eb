"""The simulated testbed (device side). Only ``mfctl mock`` and ``python -m mfctl.mock`` import it."""
