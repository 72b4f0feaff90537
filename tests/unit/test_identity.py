"""Ready and validate prove whose answer they got: port owners read from /proc for real,
and the pure decision over them."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys

import pytest

from rollout.host.facts import tcp_port
from rollout.host.scripts import ops
from rollout.steps.identity import identity_problem


def test_port_owner_is_found_from_proc_for_ipv4_and_ipv6() -> None:
    for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with socket.socket(family) as s:
            s.bind((addr, 0))
            s.listen()
            port = s.getsockname()[1]
            found = ops.owners([port], os.getpid())
        owners = found["ports"][str(port)]  # type: ignore[index]
        assert [o["pid"] for o in owners] == [os.getpid()]
        assert found["pid"]["age_secs"] >= 0  # type: ignore[index]


def test_the_kernels_listening_sockets_are_the_ones_proc_net_lists(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Listeners are asked of sock_diag (netlink: the listening sockets alone, 0.1 ms where
    /proc/net/tcp and tcp6 took 7 ms on this machine); the answer is /proc/net's, for IPv4,
    IPv6 and dual-stack sockets, and a port bound but not listening is in neither. Where
    netlink is refused (a sandbox without it), /proc/net is read as before."""
    from rollout.host.scripts import common

    with contextlib.ExitStack() as stack:
        ports = []
        for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1"),
                             (socket.AF_INET6, "::"), (socket.AF_INET, "127.0.0.1")):
            s = stack.enter_context(socket.socket(family))
            s.bind((addr, 0))
            if len(ports) < 3:
                s.listen()
            ports.append(s.getsockname()[1])
        asked = common.listening_inodes("/proc", ports)
        read = common.listening_inodes("/proc/.", ports)  # not "/proc": the files themselves
        assert asked == read and all(asked[p] for p in ports[:3]) and not asked[ports[3]]
        assert common.diag_listeners(socket.AF_INET) is not None

        real = socket.socket

        def no_netlink(family: int = -1, *args: object) -> socket.socket:
            if family == socket.AF_NETLINK:
                raise PermissionError("netlink refused")
            return real(family, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(socket, "socket", no_netlink)
        assert common.diag_listeners(socket.AF_INET) is None
        assert common.listening_inodes("/proc", ports) == read


def test_a_child_holding_the_port_names_its_parent_among_its_ancestors() -> None:
    code = ("import socket,sys; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen();"
            "print(s.getsockname()[1], flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        owners = ops.owners([port])["ports"][str(port)]  # type: ignore[index]
        assert owners[0]["pid"] == child.pid and os.getpid() in owners[0]["ancestors"]
        assert identity_problem(port, owners, os.getpid(), 100.0, 1.0) is None
    finally:
        child.communicate("")


def test_a_port_nobody_listens_on_has_no_owner() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening
        port = s.getsockname()[1]
        assert ops.owners([port])["ports"] == {str(port): []}


def owner(pid: int, *ancestors: int) -> dict[str, object]:
    return {"pid": pid, "ancestors": list(ancestors), "cmdline": "python3 stranger.py",
            "age_secs": 147.0}


def test_a_stranger_on_the_port_is_named() -> None:
    why = identity_problem(9821, [owner(77, 1)], 500, 3.0, 147.0)
    assert why is not None and why.startswith("port answered by pid 77 (not the started daemon)")
    assert "python3 stranger.py" in why


def test_the_started_daemon_or_its_child_passes() -> None:
    assert identity_problem(9821, [owner(500, 1)], 500, 3.0, 2.5) is None
    assert identity_problem(9821, [owner(501, 500, 1)], 500, 3.0, 2.5) is None


def test_an_uptime_older_than_the_start_is_not_the_started_daemon() -> None:
    why = identity_problem(9821, [owner(500, 1)], 500, 3.0, 147.0)
    assert why is not None and why.startswith("port answered by pid 500 (not the started daemon)")
    assert "147" in why


def test_no_owner_or_no_started_daemon_fails() -> None:
    assert identity_problem(9821, [], 500, 3.0, 1.0) is not None
    assert identity_problem(9821, [owner(500)], None, None, 1.0) is not None
    assert identity_problem(9821, [owner(500)], 500, None, 1.0) is not None


def test_tcp_port_of_listen_addresses() -> None:
    assert tcp_port("0.0.0.0:9821") == 9821
    assert tcp_port("[::]:9820") == 9820
    assert tcp_port("unix:///run/curio/cuzk.sock") is None
    assert tcp_port("") is None


def test_facts_tell_a_hand_started_daemon_and_a_port_stranger_from_ours() -> None:
    from rollout.host.facts import HostFacts

    raw = {
        "daemon": {"state": "running", "pid": 40, "starttime": 1, "exe": "/data/releases/a/x"},
        "cuzk_processes": [
            {"pid": 40, "ancestors": [1], "cmdline": "cuzk-daemon -c a", "supervised": False},
            {"pid": 41, "ancestors": [9, 1], "cmdline": "cuzk-daemon -c b", "supervised": True},
            {"pid": 42, "ancestors": [7, 1], "cmdline": "./cuzk -c c", "age_secs": 147.0},
            {"pid": 43, "ancestors": [7, 1], "state": "zombie"},
            {"pid": "1; rm -rf /", "ancestors": "x"},
        ],
        "port_owners": {"9821": [{"pid": 50, "ancestors": [1], "cmdline": "nc -l 9821"},
                                 {"pid": 40, "ancestors": [1]}], "x": []},
    }
    facts = HostFacts.parse(raw)
    assert [p.pid for p in facts.foreign_daemons] == [42]  # 40: daemon.pid, 41: supervised
    assert facts.foreign_daemons[0].describe() == "pid 42 (./cuzk -c c; up 147s; parent 7)"
    assert [(port, o.pid) for port, o in facts.port_strangers()] == [(9821, 50)]
