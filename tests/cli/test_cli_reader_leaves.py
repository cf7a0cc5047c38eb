"""A reader of stdout leaving early (``mfctl ... | head``) is exit 0, as ``mfctl version --exit-codes``
says, for every command: rich's Console (its on_broken_pipe raises SystemExit(1)), click's EPIPE
handling and plain writes all ended in exit 1 with nothing said, which broke ``set -o pipefail``
scripts. One mechanism at the CLI's entry (mfctl.cli.main._Stdout) — checked on real ``mfctl``
processes whose stdout is a real pipe."""

import os
import subprocess

import pytest

from support import ROOT, mfctl_cmd

# each writes its result through another path: a rich table, rich text, plain writes, emit_json, typer's help
COMMANDS = [
    ("inventory", "show", "inventory/mfabric-1024.yaml"),
    ("simulate", "--reproduce-paper"),
    ("run", "playbooks/mixtral-prototype.yaml", "--dry-run"),
    ("version", "--json"),
    ("--help",),
]


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a) for a in COMMANDS])
def test_reader_gone_before_the_first_write_is_exit_0(args):
    """The pipe's only reader closes before mfctl writes a byte: its first write meets EPIPE."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(mfctl_cmd(*args), cwd=ROOT, stdout=w, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(w)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stderr == b""  # no traceback, no "Exception ignored ... BrokenPipeError"


def test_head_1_under_pipefail_is_exit_0():
    """The tester's line, a real ``head -1`` under ``set -o pipefail``: 53 kB of table, head leaves
    after its first line (was exit 1, 10 times out of 10)."""
    script = f"set -o pipefail; {' '.join(mfctl_cmd('inventory', 'show', 'inventory/mfabric-1024.yaml'))} | head -1"
    p = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().count("\n") == 1 and p.stdout.strip()
    assert p.stderr == b""


def test_other_exit_codes_are_kept_when_the_reader_left():
    """The reader leaving changes no other outcome: an invalid inventory is still exit 3 and says so."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(mfctl_cmd("inventory", "validate", "/nonexistent/inv.yaml"), cwd=ROOT, stdout=w,
                           stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(w)
    assert p.returncode == 3
    assert b"/nonexistent/inv.yaml" in p.stderr
