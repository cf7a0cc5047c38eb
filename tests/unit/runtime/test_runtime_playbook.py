"""mfctl run's FSMoE overrides on a playbook (mfctl.runtime.playbook.override_fsmoe)."""

import pytest

from mfctl.errors import ConfigError, ExitCode, UsageError
from mfctl.runtime.playbook import load_playbook, override_fsmoe
from support import ROOT

MIXTRAL = ROOT / "playbooks" / "mixtral-prototype.yaml"


def test_given_choices_replace_the_playbooks_and_none_keeps_them():
    pb = override_fsmoe(load_playbook(MIXTRAL), pipeline_degree=2, grad_partitions=16)
    t = pb.training
    assert (t.pipeline_degree, t.bp_pipeline_degree, t.grad_partitions) == (2, 0, 16)


@pytest.mark.parametrize("kw, message", [({"pipeline_degree": 3}, "--pipeline-degree must be 1, 2, 4 or 8, not 3"),
                                         ({"bp_pipeline_degree": 0}, "--bp-pipeline-degree must be 1, 2, 4 or 8, not 0"),
                                         ({"grad_partitions": 32}, "--grad-partitions must be 1, 2, 4, 8 or 16, not 32")])
def test_other_values_are_usage_errors(kw, message):
    with pytest.raises(UsageError) as e:
        override_fsmoe(load_playbook(MIXTRAL), **kw)
    assert str(e.value) == message and e.value.exit_code == ExitCode.USAGE


TORCH_MOE = ROOT / "playbooks" / "moe-torch-mock.yaml"


@pytest.mark.parametrize("args, message", [
    ('[--batch, "abc"]', "argument --batch: invalid int value: 'abc'"),
    ('[--batch, "0"]', "--batch must be at least 1, not 0"),
    ('[--top-k, "9"]', "--top-k (9) must be at most --experts (8)"),
    ('[--d-model, "30"]', "--d-model (30) must be a multiple of --heads (4)"),
    ('[--lr, "nan"]', "--lr must be above 0, not nan"),
    ('[--batch, "8", --no-such-flag]', "unrecognized arguments: --no-such-flag"),
])
def test_the_torch_moe_jobs_arguments_are_checked_when_the_playbook_loads(tmp_path, args, message):
    """A typo in the shipped job's script_args is the playbook's error at its line, before any testbed starts
    (it used to fail every rank after the launch, its argparse line only in the hosts' logs)."""
    text = TORCH_MOE.read_text().replace("../inventory/", str(ROOT / "inventory") + "/")
    lines = text.splitlines()
    (k,) = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("script_args:")]
    lines[k] = f"  script_args: {args}"
    bad = tmp_path / "pb.yaml"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as e:
        load_playbook(bad)
    assert str(e.value) == f"{bad}:{k + 1}: mfctl.integrations.torch_moe: {message}"
    assert e.value.exit_code == ExitCode.CONFIG


def test_the_shipped_torch_moe_playbook_and_other_scripts_arguments_load():
    assert load_playbook(TORCH_MOE).runtime.script_args == ["--batch", "8", "--seq-len", "64"]
    pb = load_playbook(ROOT / "playbooks" / "mixtral-torchrun.yaml")  # another script: its arguments are its own
    assert pb.runtime.script != "mfctl.integrations.torch_moe"
