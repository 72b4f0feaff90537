"""A vast.ai fleet as an inventory, against recorded answers of GET /api/v1/instances/
(tests/unit/fixtures/vastai/, shaped as the API answers: `instances`, `next_token`,
`total_instances`, `label_counts`). No network: the page getter is a fake, and where the
real vastai package is installed its HTTP session is answered from the same files."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import rollout.cli
from rollout.commands import app, fleet
from rollout.config import vastai
from rollout.config.inventory import Inventory, load_inventory
from rollout.errors import ConfigError, EnvironmentProblem, UserError
from rollout.secrets import MASK, redact

FIXTURES = Path(__file__).parent / "fixtures" / "vastai"
REPO = Path(__file__).resolve().parents[2]
KEY = "vast-test-key-0123456789abcdef"
Answer = tuple[int, bytes]


def fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.json").read_bytes()


def pages(*answers: Answer) -> Callable[[dict[str, Any]], Answer]:
    """A page getter answering in turn; it records each query's after_token."""
    queue = list(answers)

    def get(query: dict[str, Any]) -> Answer:
        get.tokens.append(query.get("after_token"))  # type: ignore[attr-defined]
        assert query["limit"] == vastai.PAGE_LIMIT
        return queue.pop(0)

    get.tokens = []  # type: ignore[attr-defined]
    return get


def two_pages() -> Callable[[dict[str, Any]], Answer]:
    return pages((200, fixture("instances_page1")), (200, fixture("instances_page2")))


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., list[str]]:
    """The API answers with these pages (default: the two recorded ones); returns the
    keys the API was opened with."""
    monkeypatch.setenv("VAST_API_KEY", KEY)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    keys: list[str] = []

    def answer(getter: Callable[[dict[str, Any]], Answer] | None = None) -> list[str]:
        chosen = getter or two_pages()

        def open_api(key: str) -> Callable[[dict[str, Any]], Answer]:
            keys.append(key)
            return chosen

        monkeypatch.setattr(vastai, "open_api", open_api)
        return keys

    return answer


def names(inventory: Inventory) -> list[str]:
    return [h.name for h in inventory.hosts]


def test_running_instances_whose_label_matches_are_hosts(api: Callable[..., list[str]]) -> None:
    keys = api()
    inventory = load_inventory("vastai:prover-*")
    assert keys == [KEY]
    assert names(inventory) == ["prover-1", "prover-2"]
    one, two = inventory.hosts
    assert (one.address, one.port, one.user) == ("ssh4.vast.ai", 17008, "root")
    assert dict(one.vars) == {"gpu_count": 2, "gpu_model": "RTX 4090",
                              "vast_id": 21000101, "vast_label": "prover-1"}
    assert one.groups == ("vastai",)
    assert (two.address, two.port) == ("ssh7.vast.ai", 23451)  # Jupyter runtime: port + 1
    assert two.vars["gpu_model"] == "RTX 5090"
    assert inventory.skipped == (
        "prover-3 (instance 21000103): not running (actual_status 'exited')",
        "prover-4 (instance 21000104): not running (actual_status 'loading')",
    )
    assert one.host_key_policy == "strict"
    assert one.known_hosts == Path("~/.ssh/known_hosts").expanduser()


def test_every_page_is_read_once(api: Callable[..., list[str]]) -> None:
    getter = two_pages()
    api(getter)
    load_inventory("vastai:*")
    assert getter.tokens == [None, "eyJpZCI6IDIxMDAwMTAzfQ=="]  # type: ignore[attr-defined]


def test_an_exact_label_and_an_unlabelled_instance(api: Callable[..., list[str]]) -> None:
    api()
    assert names(load_inventory("vastai:other")) == ["other"]
    api()
    everything = load_inventory("vastai:*")
    assert names(everything) == ["prover-1", "prover-2", "other", "vast-21000106"]
    assert everything.get("other").vars["gpu_count"] == 8


def test_no_matching_running_instance_is_a_config_error(api: Callable[..., list[str]]) -> None:
    api()
    with pytest.raises(ConfigError) as info:
        load_inventory("vastai:prover-3")
    message = str(info.value)
    assert message.startswith("vastai:prover-3: no running vast.ai instance is labelled")
    assert "6 instances listed" in message and "not running (actual_status 'exited')" in message
    assert info.value.exit_code == 2


def fleet_yaml(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text("defaults:\n  known_hosts: vast_known_hosts\n  host_key_policy: accept-new\n"
                    "  vars: {gpu_threads: 16}\n  ssh_config: null\n" + body)
    return path


def test_direct_addressing_from_fleet_yaml(api: Callable[..., list[str]], tmp_path: Path) -> None:
    api()
    path = fleet_yaml(tmp_path, "vastai:\n  label: prover-*\n  address: direct\n"
                      "  groups: [gpu, vast]\n")
    inventory = load_inventory(path)
    (one,) = inventory.hosts
    assert (one.name, one.address, one.port) == ("prover-1", "203.0.113.7", 40612)
    assert one.groups == ("gpu", "vast")
    assert one.known_hosts == tmp_path / "vast_known_hosts"
    assert one.host_key_policy == "accept-new"
    assert one.vars["gpu_threads"] == 16 and one.vars["gpu_count"] == 2
    assert inventory.skipped[0] == (
        "prover-2 (instance 21000102): no direct SSH port (no host port mapped to 22/tcp)"
    )


def test_fleet_yaml_mixes_hosts_and_instances(api: Callable[..., list[str]],
                                              tmp_path: Path) -> None:
    api()
    path = fleet_yaml(tmp_path, "vastai: {label: other}\nhosts:\n"
                      "  - {name: bare-metal, address: 10.0.0.5}\n")
    assert names(load_inventory(path)) == ["bare-metal", "other"]
    api()
    clash = fleet_yaml(tmp_path, "vastai: {label: other}\nhosts:\n"
                       "  - {name: other, address: 10.0.0.5}\n")
    with pytest.raises(ConfigError, match="instances named like hosts: other") as info:
        load_inventory(clash)
    assert info.value.location is not None and info.value.location.key == "vastai.label"


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ("vastai: {label: x, address: tunnel}\n", "vastai.address"),
        ("vastai: {label: x, labels: y}\n", "vastai.labels"),
        ("vastai: {label: ''}\n", "vastai.label"),
        ("vastai: {label: x, groups: ['a b']}\n", "vastai.groups[0]"),
        ("playbook: p.yaml\n", "hosts"),
    ],
)
def test_bad_vastai_keys_name_the_line_and_key(tmp_path: Path, body: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_inventory(fleet_yaml(tmp_path, body))
    assert info.value.location is not None and info.value.location.key == key


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ((200, b"<html>maintenance</html>"), "not JSON"),
        ((200, b'[{"id": 1}]'), "a JSON list, not an object"),
        ((200, b'{"instances": {"id": 1}}'), "instances: Input should be a valid list"),
        ((200, b"[" * 100_000 + b"]" * 100_000), "not JSON"),
        ((200, b" " * (vastai.MAX_PAGE_BYTES + 1)), "larger than"),
        ((503, b"upstream \x1b[31mdown\n"), "HTTP 503: 'upstream \\x1b[31mdown\\n'"),
    ],
)
def test_a_bad_answer_is_a_clear_error(api: Callable[..., list[str]],
                                       answer: Answer, says: str) -> None:
    api(pages(answer))
    with pytest.raises(EnvironmentProblem) as info:
        load_inventory("vastai:prover-*")
    assert says in str(info.value)
    assert info.value.exit_code == 3


def test_pages_that_never_end_are_refused(api: Callable[..., list[str]]) -> None:
    page = json.loads(fixture("instances_page1"))
    api(pages(*[(200, json.dumps(page).encode())] * 2))
    with pytest.raises(EnvironmentProblem, match="next_token repeats"):
        load_inventory("vastai:prover-*")

    def endless(query: dict[str, Any]) -> Answer:
        token = int(query.get("after_token") or 0) + 1
        return 200, json.dumps({"instances": [], "next_token": token}).encode()

    api(endless)
    with pytest.raises(EnvironmentProblem, match=f"more than {vastai.MAX_PAGES} pages"):
        load_inventory("vastai:prover-*")


def test_a_refused_key_and_a_dead_network(api: Callable[..., list[str]]) -> None:
    api(pages((401, b'{"error": "invalid api key"}')))
    with pytest.raises(UserError, match=r"refused the key \(HTTP 401\)") as info:
        load_inventory("vastai:prover-*")
    assert type(info.value) is UserError and KEY not in str(info.value)

    def unreachable(query: dict[str, Any]) -> Answer:
        raise ConnectionRefusedError(f"connection refused (key {KEY})")

    api(unreachable)
    with pytest.raises(EnvironmentProblem) as fail:
        load_inventory("vastai:prover-*")
    assert str(fail.value).startswith("cannot fetch the vast.ai API's /api/v1/instances/: "
                                      "connection refused (fix: ")
    assert KEY not in str(fail.value) and "Error" not in str(fail.value)


def test_hostile_instances_are_skipped_or_made_safe(api: Callable[..., list[str]],
                                                    tmp_path: Path) -> None:
    api(pages((200, fixture("instances_hostile"))))
    inventory = load_inventory("vastai:*")
    assert names(inventory) == ["twin-31000002", "twin-31000003"]  # a shared label: + the id
    assert inventory.refused["evil-rm--rf-id"] == (
        "vast.ai instance 31000001: no usable proxy SSH address "
        "('-oProxyCommand=touch /tmp/pwned')")
    assert inventory.refused["31mred"] == (
        "vast.ai instance 31000004: its row does not validate (label: holds a control "
        "character)")  # its label holds ESC
    assert inventory.get("twin-31000002").vars["vast_label"] == "twin"
    api(pages((200, fixture("instances_hostile"))))
    direct = load_inventory(fleet_yaml(tmp_path, "vastai: {label: '*', address: direct}\n"))
    assert [(h.name, h.address, h.port) for h in direct.hosts] == [
        ("evil-rm--rf-id", "203.0.113.66", 40066)]


def test_names_are_safe_and_unique() -> None:
    rows = [vastai.Instance(id=i, label=label) for i, label in
            enumerate(["a b", "a-b", "", "x" * 300, "../..", "ok"])]
    got = vastai.host_names(rows)
    assert got == {0: "a-b-0", 1: "a-b-1", 2: "vast-2", 3: "x" * 63, 4: "vast-4", 5: "ok"}
    spelled = [vastai.Instance(id=5, label="a"), vastai.Instance(id=6, label="a"),
               vastai.Instance(id=7, label="a-5")]
    assert vastai.host_names(spelled) == {5: "vast-5", 6: "a-6", 7: "vast-7"}
    clash = [vastai.Instance(id=5, label="a", actual_status="running", ssh_host="h",
                             ssh_port=22 + i) for i in range(2)]
    fleet = vastai.select(clash, vastai.VastaiSource(label="a"))  # one id twice: malformed
    assert [h.name for h in fleet.hosts] == ["a"]
    assert fleet.skipped == ["a (instance 5): another instance has its name"]


def test_a_bad_ref_is_a_user_error(api: Callable[..., list[str]]) -> None:
    with pytest.raises(UserError, match="expected vastai:LABEL"):
        load_inventory("vastai:")
    with pytest.raises(UserError, match="expected vastai:LABEL"):
        load_inventory("vastai:" + "x" * 300)


def test_no_key_is_a_user_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(vastai, "open_api", lambda key: pytest.fail("the API was opened"))
    with pytest.raises(UserError, match="no vast.ai API key: set VAST_API_KEY") as info:
        load_inventory("vastai:prover-*")
    assert type(info.value) is UserError and info.value.exit_code == 2
    assert str(tmp_path / "config" / "vastai" / "vast_api_key") in str(info.value)


@pytest.mark.parametrize("where", ["config/vastai/vast_api_key", ".vast_api_key"])
def test_the_key_file_is_read_and_masked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                         where: str) -> None:
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    secret = f"file-key-{where.replace('/', '-')}"
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).write_text(f"{secret}\n")
    assert vastai.api_key() == secret
    assert redact(f"Bearer {secret}") == f"Bearer {MASK}"


def test_a_key_file_that_holds_no_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / ".vast_api_key").write_bytes(b"\xff" * 10_000)
    with pytest.raises(UserError, match="larger than its 4,096-byte cap"):
        vastai.api_key()
    (tmp_path / ".vast_api_key").write_bytes(b"\xff" * 10)
    with pytest.raises(UserError, match="does not hold a key"):
        vastai.api_key()


def test_no_package_is_an_environment_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vastai", None)  # `import vastai` raises ImportError
    with pytest.raises(EnvironmentProblem) as info:
        vastai.open_api(KEY)
    assert info.value.exit_code == 3
    assert "pip install vastai==1.9.1" in str(info.value)


def test_the_real_package_asks_the_instances_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """vastai 1.9.1's own client, its HTTP session answered from the recordings."""
    pytest.importorskip("vastai")
    import requests
    import urllib3

    sent: list[requests.PreparedRequest] = []
    bodies = [fixture("instances_page1"), fixture("instances_page2")]

    def send(self: requests.Session, prep: requests.PreparedRequest,
             **kwargs: Any) -> requests.Response:
        sent.append(prep)
        response = requests.Response()
        response.status_code = 200
        response.raw = urllib3.HTTPResponse(body=io.BytesIO(bodies.pop(0)), preload_content=False)
        response.url = str(prep.url)
        return response

    monkeypatch.setattr(requests.Session, "send", send)
    rows = vastai.fetch_instances(vastai.open_api(KEY))
    assert [row.id for row in rows] == [21000101 + i for i in range(6)]
    assert all(str(p.url).startswith("https://console.vast.ai/api/v1/instances/?")
               for p in sent)
    assert sent[0].headers["Authorization"] == f"Bearer {KEY}"
    assert "after_token=eyJpZCI6IDIxMDAwMTAzfQ%3D%3D" in str(sent[1].url)


# --- the command line, down to the inventory --------------------------------------


def run_rollout(*argv: str) -> int:
    saved = sys.argv
    sys.argv = ["rollout", *argv]
    try:
        rollout.cli.program.run(["rollout", *argv])
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        sys.argv = saved
    return 0


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The plans the commands made, instead of touching hosts."""
    made: list[Any] = []
    real = fleet.make_plan

    def make_plan(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(fleet, "make_plan", make_plan)
    monkeypatch.setattr("rollout.commands.status.fleet_rows", lambda plan: [])
    monkeypatch.setattr(app, "dry_run", lambda plan, *a, **k: SimpleNamespace(exit_code=0))
    monkeypatch.chdir(REPO)
    return made


@pytest.mark.parametrize(
    "argv",
    [
        ("status", "--hosts", "vastai:prover-*", "--playbook", "playbooks/lab.yaml"),
        ("rollout", "--hosts", "vastai:prover-*", "--playbook", "playbooks/lab.yaml",
         "--dry-run"),
    ],
)
def test_commands_take_a_vastai_fleet(api: Callable[..., list[str]], plans: list[Any],
                                      capsys: pytest.CaptureFixture[str],
                                      argv: tuple[str, ...]) -> None:
    api()
    assert run_rollout(*argv) == 0
    (plan,) = plans
    assert [(h.name, h.address, h.port) for h in plan.hosts] == [
        ("prover-1", "ssh4.vast.ai", 17008), ("prover-2", "ssh7.vast.ai", 23451)]
    err = capsys.readouterr().err
    assert "warning: skipped prover-3 (instance 21000103): not running" in err


def test_a_command_without_a_key_exits_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                         plans: list[Any],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert run_rollout("status", "--hosts", "vastai:prover-*") == 2
    err = capsys.readouterr().err
    assert "error: no vast.ai API key" in err and "Traceback" not in err


def test_a_resumable_run_keeps_the_ref() -> None:
    request = app.RolloutRequest("vastai:prover-*")
    assert request.replayable()["hosts"] == "vastai:prover-*"
