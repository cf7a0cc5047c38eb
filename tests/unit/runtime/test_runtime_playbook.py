"""mfctl run's FSMoE overrides on a playbook (mfctl.runtime.playbook.override_fsmoe)."""

import pytest

from mfctl.errors import ExitCode, UsageError
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
