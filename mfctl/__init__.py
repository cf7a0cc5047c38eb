"""mfctl — control plane and operator CLI of an mFabric testbed.

Nothing heavy is imported here: ``mfctl --help`` must stay fast.
"""

__version__ = "0.1.0"
