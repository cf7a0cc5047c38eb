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
    ('[--lr, "nan"]', "--lr must be a finite number, not nan"),
    ('[--lr, "inf"]', "--lr must be a finite number, not inf"),
    ('[--aux-loss, "nan"]', "--aux-loss must be a finite number, not nan"),
    ('[--help]', "--help (-h) is not an option of a run: it prints the job's options and exits (run "
                 "python -m mfctl.integrations.torch_moe --help to see them)"),
    ('[-h]', "--help (-h) is not an option of a run"),
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
    assert str(e.value).startswith(f"{bad}:{k + 1}: mfctl.integrations.torch_moe: {message}")
    assert e.value.exit_code == ExitCode.CONFIG


def test_the_shipped_torch_moe_playbook_and_other_scripts_arguments_load():
    assert load_playbook(TORCH_MOE).runtime.script_args == ["--batch", "8", "--seq-len", "64"]
    pb = load_playbook(ROOT / "playbooks" / "mixtral-torchrun.yaml")  # another script: its arguments are its own
    assert pb.runtime.script != "mfctl.integrations.torch_moe"


PROTOTYPE = ROOT / "playbooks" / "mixtral-prototype.yaml"


def _with(tmp_path, section: str, line: str):
    """The prototype playbook with ``line`` (``key: value``) under ``section:`` (in place of the key's
    own line there, else first); its line number."""
    lines = PROTOTYPE.read_text().replace("../inventory/", str(ROOT / "inventory") + "/").splitlines()
    if f"{section}:" not in lines:
        lines.append(f"{section}:")
    start, key = lines.index(f"{section}:") + 1, line.split(":")[0]
    end = next((i for i in range(start, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    k = next((i for i in range(start, end) if lines[i].startswith(f"  {key}:")), None)
    if k is None:
        k = start
        lines.insert(k, f"  {line}")
    else:
        lines[k] = f"  {line}"
    p = tmp_path / "pb.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p, k + 1


@pytest.mark.parametrize("section, line, message", [
    # 1e-300 passed gt=0: every testbed-second timeout divided by it overflowed (links.wait: "timestamp out of range")
    ("mock", "time_scale: 1e-300", "mock.time_scale: Input should be greater than or equal to 0.01"),
    ("mock", "time_scale: 10001", "mock.time_scale: Input should be less than or equal to 10000"),
    ("mock", "time_scale: .inf", "mock.time_scale: Input should be a finite number"),
    ("policy", "min_improvement: .nan", "policy.min_improvement: Input should be a finite number"),  # was "less than 1"
    ("policy", "min_gain_s: -.inf", "policy.min_gain_s: Input should be a finite number"),
    ("policy", "expected_reconfig_s: 1e300", "policy.expected_reconfig_s: Input should be less than or equal to 86400"),
    ("training", "domain_concentration: .inf", "training.domain_concentration: Input should be a finite number"),
    ("runtime", "linkup_timeout_s: 1e300", "runtime.linkup_timeout_s: Input should be less than or equal to 86400"),
    ("runtime", "drain_timeout_s: 1e-300", "runtime.drain_timeout_s: Input should be greater than or equal to 0.05"),
    ("runtime", "resume_timeout_s: .inf", "runtime.resume_timeout_s: Input should be a finite number"),
    ("runtime", "health_interval_s: 1e300", "runtime.health_interval_s: Input should be less than or equal to 86400"),
    ("runtime", "health_interval_s: 1e-300", "runtime.health_interval_s: must be 0 (off) or at least 1 testbed second"),
    ("runtime", "slurm: {queue_timeout_s: 1e300}", "runtime.slurm.queue_timeout_s: Input should be less than or equal "
                                                   "to 604800"),
    ("training", "micro_batches: 100000", "training.micro_batches: Input should be less than or equal to 4096"),
])
def test_playbook_floats_out_of_range_or_not_finite_are_config_errors_at_their_line(tmp_path, section, line, message):
    p, no = _with(tmp_path, section, line)
    with pytest.raises(ConfigError) as e:
        load_playbook(p)
    assert str(e.value) == f"{p}:{no}: {message}" and e.value.exit_code == ExitCode.CONFIG


@pytest.mark.parametrize("section, line, attr, value", [
    ("mock", "time_scale: 0.01", ("mock", "time_scale"), 0.01),
    ("mock", "time_scale: 10000", ("mock", "time_scale"), 10000),
    ("runtime", "health_interval_s: 0", ("runtime", "health_interval_s"), 0),
    ("runtime", "health_interval_s: 1", ("runtime", "health_interval_s"), 1),
    ("runtime", "linkup_timeout_s: 86400", ("runtime", "linkup_timeout_s"), 86400),
])
def test_playbook_floats_at_their_bounds_load(tmp_path, section, line, attr, value):
    pb = load_playbook(_with(tmp_path, section, line)[0])
    assert getattr(getattr(pb, attr[0]), attr[1]) == value


def test_the_torch_moe_jobs_experts_must_divide_over_its_ranks_before_anything_starts(tmp_path):
    """--experts 3 on 4 hosts x 1 rank: every rank failed after the launch; now the run's plan says so at the line."""
    from mfctl.inventory import load_inventory
    from mfctl.runtime.plan import plan_run

    text = TORCH_MOE.read_text().replace("../inventory/", str(ROOT / "inventory") + "/")
    lines = text.splitlines()
    (k,) = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("script_args:")]
    lines[k] = '  script_args: [--experts, "3"]'
    bad = tmp_path / "pb.yaml"
    bad.write_text("\n".join(lines) + "\n")
    pb = load_playbook(bad)
    with pytest.raises(ConfigError) as e:
        plan_run(pb, load_inventory(pb.inventory_path()))
    assert str(e.value) == (f"{bad}:{k + 1}: mfctl.integrations.torch_moe: --experts 3 do not divide over its 4 EP "
                            "ranks (4 hosts x nproc_per_node 1)")
    lines[k] = '  script_args: [--experts, "8"]'
    bad.write_text("\n".join(lines) + "\n")
    plan_run(load_playbook(bad), load_inventory(pb.inventory_path()))  # 8 over 4: fine
