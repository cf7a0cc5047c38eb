"""mfctl.inventory.local: the files this machine needs to reach a testbed, as warnings."""

from mfctl.inventory import load_inventory
from mfctl.inventory.local import local_file_problems
from support import PROTOTYPE


def _inventory(tmp_path, known_hosts, key_file=None):
    text = PROTOTYPE.read_text().replace("known_hosts: ~/.ssh/known_hosts", f"known_hosts: {known_hosts}")
    if key_file:
        text = text.replace("user: mfabric, agent: true}", f"user: mfabric, key_file: {key_file}}}", 1)  # gpu01 only
    p = tmp_path / "inv.yaml"
    p.write_text(text)
    return load_inventory(p, cached=False)


def test_a_missing_known_hosts_is_said_once_and_a_bad_key_names_its_host(tmp_path):
    inv = _inventory(tmp_path, tmp_path / "none", key_file=tmp_path / "key.pub")
    (tmp_path / "key.pub").write_text("ssh-ed25519 AAAA... a public key\n")
    kh, key = local_file_problems(inv)
    assert kh == f"known_hosts {tmp_path / 'none'} does not exist (strict host-key checking will refuse every host)"
    assert key == f"SSH key {tmp_path / 'key.pub'} is not a PEM/OpenSSH private key file (gpu01)"


def test_nothing_to_say_when_the_files_are_there(tmp_path):
    (tmp_path / "known_hosts").write_text("")
    (tmp_path / "id").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n...\n")
    assert local_file_problems(_inventory(tmp_path, tmp_path / "known_hosts", key_file=tmp_path / "id")) == []
    assert local_file_problems(_inventory(tmp_path, tmp_path / "known_hosts")) == []  # the agent: no key file
