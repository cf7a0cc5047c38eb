"""A real Mixture-of-Experts training job in plain torch that mfctl re-wires from its own traffic.

``python -m mfctl.integrations.torch_moe [--iterations N …]`` (or ``torchrun … -m
mfctl.integrations.torch_moe``, as ``playbooks/moe-torch-mock.yaml`` launches it on every mock
host): a small byte-level MoE transformer (:mod:`.model`: top-k router, experts, causal attention)
that learns on three real texts whose mixture shifts by phase (:mod:`.data`), with its experts
spread over the ``torch.distributed`` ranks and tokens moved by real ``all_to_all_single``
dispatch/combine (:mod:`.dispatch`; gloo on the CPU, NCCL where GPUs exist). Under ``mfctl run`` it
reports its router's real per-layer token counts as server × server traffic (:mod:`.traffic`),
answers propose/paused/routes/resume/stop at its iteration boundary with every rank agreeing
(:mod:`mfctl.integrations.safepoint`), sends its measured all-to-all and GEMM times
(:class:`mfctl.integrations.torch_timing.Timings`) and prints Megatron-style iteration lines
(``mfctl runs import-log`` reads them). The loop: :mod:`.job`. torch is imported only when it runs.
"""
