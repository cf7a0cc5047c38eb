"""Measurements on the testbed: nccl-tests against what the circuits should give (:mod:`.nccl`),
and the FSMoE cost profile that ``mfctl schedule`` uses (:mod:`.profile`). Services: they take a
:class:`mfctl.context.Context`, return data and print nothing."""
