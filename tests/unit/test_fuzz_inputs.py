"""Hostile values at every place a value enters rollout, generated (hypothesis): whatever the
value, nothing runs, the answer is the value itself or a refusal (a UserError, exit 2, or a
host's own failure), and never any other exception (exit 70).

Each payload tries to run `touch SENTINEL` through a shell, an option, a template or an
ssh_config `Match exec`; every test asserts that no sentinel was made."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakehost import CannedStream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout.bundle.manifest import parse_manifest
from rollout.config import vastai
from rollout.config.hostvar_checks import control_character
from rollout.config.inventory import load_inventory
from rollout.config.playbook import parse_set_options
from rollout.config.render import render_command
from rollout.errors import TransportError, UserError
from rollout.host.facts import HostFacts
from rollout.transport.agent import HostAgent

SENTINELS = Path(tempfile.mkdtemp(prefix="rollout-fuzz-"))
"""Where a payload that ran would leave its file: one folder for the whole module."""
PAYLOADS = [
    f"$(touch {SENTINELS}/a)", f"`touch {SENTINELS}/b`", f";touch {SENTINELS}/c;",
    f"|touch {SENTINELS}/d", f"&& touch {SENTINELS}/e", f"\ntouch {SENTINELS}/f\n",
    f"-oProxyCommand=touch {SENTINELS}/g", f"-c'import os; os.system(\"touch {SENTINELS}/h\")'",
    "'", '"', "\\", "-", "--", "-c", "{{ 7 * 7 }}", "{% raw %}", "{#", "%h", "%%", "*", "~",
    "#", " ", "\t", "\x1b[2J", "\x1b]0;t\x07", "\x00", "\x7f", "\x85", "\u202e", "\u2028",
    "../../etc/passwd", "@", ":", "[", "]", "{", "}", "=", ",", "!", "&", "<<EOF", "\r",
]
hostile = st.lists(
    st.one_of(st.sampled_from(PAYLOADS), st.text(max_size=6)), min_size=1, max_size=5
).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | hostile,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile, inner, max_size=4),
    max_leaves=20,
)
yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | hostile,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile, inner, max_size=4),
    max_leaves=20,
)
"""Values a YAML file written as JSON holds exactly (JSON has no NaN or infinity)."""
FUZZ = settings(max_examples=60, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def as_yaml(doc: Any) -> str:
    """A document as JSON, which YAML reads back exactly: raw UTF-8, except the three
    characters YAML takes for line breaks inside a quoted scalar (NEL, LS, PS), which JSON
    leaves raw and YAML would fold to a space; escaped, both read them as themselves."""
    text = json.dumps(doc, ensure_ascii=False)
    return text.replace("\x85", "\\u0085").replace("\u2028", "\\u2028").replace(
        "\u2029", "\\u2029")


def _made() -> list[str]:
    return sorted(os.listdir(SENTINELS))


@pytest.fixture(autouse=True)
def nothing_ran() -> Iterator[None]:
    before = _made()
    yield
    assert _made() == before == [], "a hostile value ran a command"


@FUZZ
@given(value=hostile)
def test_a_set_value_is_its_text_or_refused(value: str) -> None:
    try:
        sets = parse_set_options([f"v={value}"])
    except UserError:
        return
    if value.lstrip()[:1] not in ("{", "[") or value.lstrip()[:2] in ("{{", "{%", "{#"):
        assert sets == {"v": value}


@FUZZ
@given(raw=json_values)
def test_host_facts_of_any_shape_are_read_never_raised(raw: Any) -> None:
    HostFacts.parse(raw)
    HostFacts.parse({"daemon": raw, "supervisor": raw, "memory": raw, "processes": raw})


@FUZZ
@given(line=st.one_of(hostile, json_values.map(json.dumps),
                      st.dictionaries(st.sampled_from(["id", "exit", "stdout", "stderr",
                                                        "timed_out", "oversized"]),
                                      json_values).map(json.dumps)))
def test_an_agent_answer_is_a_result_or_that_hosts_error(line: str) -> None:
    agent = HostAgent("h1", CannedStream([line]))
    try:
        agent.shell("true", 5, None)
    except TransportError as e:  # HostAnswerError among them: that host's failure
        assert "\x1b" not in str(e)


@FUZZ
@given(value=hostile.filter(lambda v: "\x00" not in v))
def test_argv_and_env_values_reach_the_command_byte_for_byte(value: str) -> None:
    argv = ["sh", "-c", 'printf "%s|%s" "$1" "$V"', "_", "{{ v }}"]
    try:
        line = render_command(argv, {"V": "{{ v }}"}, {"v": value})
    except UserError:
        assert value.startswith("-"), "only a value that would be an option is refused"
        return
    out = subprocess.run(["sh", "-c", line], capture_output=True, cwd=SENTINELS, check=True)
    assert out.stdout.decode("utf-8", "surrogateescape") == f"{value}|{value}"


def _fleet(tmp: Path, address: str, user: str, var: Any) -> Path:
    (tmp / "ssh_config").write_text(
        f'Match exec "touch {SENTINELS}/exec-%h"\n  User nobody\n'
        f"Host *\n  LocalCommand touch {SENTINELS}/local\n  PermitLocalCommand yes\n")
    (tmp / "known_hosts").write_text("")
    entry = {"name": "h1", "address": address, "user": user, "vars": {"v": var}}
    doc = {"defaults": {"ssh_config": "ssh_config", "known_hosts": "known_hosts"},
           "hosts": [entry]}
    path = tmp / "fleet.yaml"
    path.write_text(as_yaml(doc))
    return path


@FUZZ
@given(address=st.one_of(hostile, st.sampled_from(["127.0.0.1", "::1", "lab-1.example"])),
       user=st.one_of(hostile, st.just("root")), var=json_values)
def test_an_inventory_entry_loads_as_data_or_is_refused(address: str, user: str,
                                                        var: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = _fleet(Path(folder), address, user, var)
        try:
            inventory = load_inventory(path)
        except UserError:
            return
    host = inventory.hosts[0]
    assert host.address == address and host.user == user
    assert not set(address) & set("$`;|&<>(){}'\"\\ \t\n*?!#~"), "an address is a name or an IP"


@FUZZ
@given(fields=st.dictionaries(
    st.sampled_from(["release", "version", "image", "image_digest", "build_args",
                     "source_revision", "created", "executables"]), json_values))
def test_a_manifest_of_any_shape_is_read_or_refused(fields: dict[str, Any]) -> None:
    try:
        parse_manifest(json.dumps(fields), "bundle/manifest.json")
    except UserError as e:
        assert "\x1b" not in e.message


VAST_FIELDS = ["label", "actual_status", "ssh_host", "ssh_port", "public_ipaddr", "num_gpus",
               "gpu_name", "ports", "id"]


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(VAST_FIELDS), json_values, max_size=4))
def test_one_hostile_vast_row_fails_only_its_host(fields: dict[str, Any]) -> None:
    good = {"id": 51000001, "label": "prover-1", "actual_status": "running",
            "ssh_host": "ssh1.vast.ai", "ssh_port": 20001, "num_gpus": 1, "gpu_name": "RTX 4090"}
    bad = {**good, "id": 51000002, "label": "prover-2", **fields}
    body = json.dumps({"instances": [good, bad], "next_token": None}).encode()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VAST_API_KEY", "vast-fuzz-key-0123456789")
        patch.setattr(vastai, "open_api", lambda key: lambda query: (200, body))
        inventory = load_inventory("vastai:prover-*")
    names = [h.name for h in inventory.hosts]
    assert "prover-1" in names, "a hostile row took a good one down with it"
    for host in inventory.hosts:
        assert control_character(list(host.vars.values())) is None
        assert not set(host.address) & set("$`;|&<>(){}'\"\\ \t\n")


@FUZZ
@given(var=yaml_values, user=st.one_of(hostile, st.just("root")))
def test_group_vars_are_data_or_refused(var: Any, user: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "hosts").write_text("[provers]\nh1 ansible_host=127.0.0.1\n")
        (root / "group_vars").mkdir()
        (root / "group_vars" / "provers.yaml").write_text(
            as_yaml({"ansible_user": user, "v": var}))
        try:
            inventory = load_inventory(root / "hosts")
        except UserError:
            return
    host = inventory.hosts[0]
    assert host.user == user and host.vars.get("v") == var
