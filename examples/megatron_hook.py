"""The Megatron-Core hook of mfctl, as a training script imports it (a thin wrapper).

The hook is shipped as :mod:`mfctl.integrations.megatron` (megatron-core >=0.16,<0.17, the
all-to-all dispatcher; docs/runtime-protocol.md, "For framework authors"). Inside a Megatron
training script that ``mfctl run`` starts (it sets MFCTL_CONTROLLER, MFCTL_RUN_TOKEN_FILE and
MFCTL_HOST)::

    from examples.megatron_hook import MFabricHook
    hook = MFabricHook.from_env(hidden=args.hidden_size, bytes_per_element=2)  # on EVERY rank
    for layer_no, layer in enumerate(moe_layers):       # the model's MoELayer modules
        hook.attach(layer.token_dispatcher, layer_no)   # refuses allgather / flex dispatchers
    for iteration in ...:
        train_step(...)
        if hook.end_of_iteration(iteration, seconds=elapsed, tokens=global_batch_tokens):
            break                                       # the controller stopped the run: every rank
    hook.close(iteration)

``end_of_iteration`` is a collective (one ``all_gather_object`` over the job): every rank calls it.
"""

from mfctl.integrations.megatron import MFabricHook, UnsupportedDispatcher, check_dispatcher

__all__ = ["MFabricHook", "UnsupportedDispatcher", "check_dispatcher"]
