"""Where a host downloads proof parameters (issue 27): as curio's fetcher decides it
(lib/fastparamfetch/paramfetch.go: IPFS_GATEWAY, else curio's own mirror, the CID appended
as it is), params.gateway winning over both. The host's IPFS_GATEWAY is hostile: one that is
not a plain http(s) URL is refused, naming the host and the value escaped, and never used."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError
from test_params import CID, DATA, NAME, context, entry, mirror  # noqa: F401 (a fixture)

from rollout.config.sections import CURIO_GATEWAY, MAX_URL, ParamsSpec, url_problem
from rollout.errors import StepFailed
from rollout.steps.base import HostContext
from rollout.steps.params import check_params, gateway_of, params_calls
from rollout.transport.local import LocalTransport

HOSTILE = [
    "http://mirror /ipfs/",  # a space
    "http://mirror/ipfs/'$(touch /tmp/x)'/",  # quotes, shell text
    'http://mirror/"ipfs"/',
    "http://mirror/ipfs/\n--output=/etc/passwd/",  # a newline, an option after it
    "-o/tmp/x http://mirror/ipfs/",  # starts with `-`
    "--header=x",
    "file:///etc/passwd/",
    "ftp://mirror/ipfs/",
    "http://user:secret@mirror/ipfs/",  # credentials
    "http://mirror/ipfs/?x=1/",  # a query
    "http://mirror/ipfs/#frag/",
    "http://mirrör/ipfs/",  # non-ASCII
    "http://mirror/ipfs/\u202e/",  # a bidi control
    "http://mirror/ipfs/\x00/",
    "http://mirror/" + "a" * MAX_URL + "/",  # huge
    "http:///ipfs/",  # no host
    "http://-mirror/ipfs/",
]


def ctx_with(tmp_path: Path, gateway: str | None = None) -> HostContext:
    """A host on this machine whose actions each start a python of their own (the tests'
    warm agent keeps the environment it started with, as a host's agent does for its run):
    the host's IPFS_GATEWAY is this process's."""
    ctx = context(tmp_path, gateway=gateway, files=[entry(size=len(DATA))])
    return dataclasses.replace(ctx, transport=LocalTransport("h"))


def test_the_default_is_curios_own_mirror(tmp_path: Path) -> None:
    assert ParamsSpec().gateway is None and ParamsSpec(gateway="").gateway is None
    assert CURIO_GATEWAY == "https://pub-08ae819c828244bdbe5f615fd8c5e144.r2.dev/ipfs/"
    for unset in ({}, {"gateway": None}, {"gateway": ""}):  # curio: "" is unset too
        assert gateway_of(ctx_with(tmp_path), unset).prefix == CURIO_GATEWAY


def test_ipfs_gateway_on_the_host_overrides_the_default_as_curio_reads_it(
    tmp_path: Path,
) -> None:
    got = gateway_of(ctx_with(tmp_path), {"gateway": "http://10.0.0.5:8080/ipfs/"})
    assert (got.prefix, got.origin) == ("http://10.0.0.5:8080/ipfs/", "IPFS_GATEWAY on the host")


def test_params_gateway_wins_over_ipfs_gateway(tmp_path: Path) -> None:
    ctx = ctx_with(tmp_path, "http://mirror.example:9000/")
    for probe in ({}, {"gateway": "http://other/ipfs/"}, {"gateway": "'; rm -rf /"}):
        got = gateway_of(ctx, probe)
        assert (got.prefix, got.origin) == ("http://mirror.example:9000/ipfs/",
                                            "params.gateway")


@pytest.mark.parametrize("value", [*HOSTILE, "http://mirror/ipfs", 7, ["http://m/ipfs/"]])
def test_a_bad_ipfs_gateway_is_refused_naming_the_host_and_the_value_escaped(
    tmp_path: Path, value: object
) -> None:
    with pytest.raises(StepFailed) as err:
        gateway_of(ctx_with(tmp_path), {"gateway": value})
    said = str(err.value)
    assert said.startswith("IPFS_GATEWAY on h is ") and "refused, never used" in said
    assert said.isascii() and said.isprintable() and len(said) < 700, said
    assert not err.value.retryable


@pytest.mark.parametrize("value", HOSTILE)
def test_a_bad_params_gateway_is_refused_at_load(value: str) -> None:
    assert url_problem(value) is not None
    with pytest.raises(ValidationError, match="params.gateway"):
        ParamsSpec(gateway=value.rstrip("/"))


@pytest.mark.parametrize("value", [
    "https://proofs.filecoin.io", "http://10.0.0.5:8080", "http://[fd00::5]:8080/mirror/",
    "https://mirror.example/a_b/c-d/v%20x/", CURIO_GATEWAY,
])
def test_plain_urls_are_taken(value: str) -> None:
    assert url_problem(value) is None
    assert ParamsSpec(gateway=value).gateway == value.rstrip("/")


def test_the_plan_names_the_url_the_host_downloads_from(tmp_path: Path) -> None:
    probe = {"sizes": {}, "reuse": {}, "gateway": "http://10.0.0.5/ipfs/"}
    fetch = params_calls(ctx_with(tmp_path).target, probe)[-1]
    assert fetch.kwargs["gateway"] == "http://10.0.0.5/ipfs/" and fetch.kwargs["missing"] == [NAME]
    there = {**probe, "sizes": {NAME: len(DATA)}}  # nothing to download: no gateway looked at
    assert "gateway" not in params_calls(ctx_with(tmp_path).target, there)[-1].kwargs


def test_the_host_downloads_from_its_ipfs_gateway(
    tmp_path: Path, mirror: SimpleNamespace, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setenv("IPFS_GATEWAY", f"{mirror.url}/ipfs/")
    note = check_params(ctx_with(tmp_path))
    assert f"{NAME} downloaded ({len(DATA)} bytes), verified" in note
    assert f"downloads from {mirror.url}/ipfs/ (IPFS_GATEWAY on the host)" in note
    assert [r["path"] for r in mirror.requests() if r["method"] == "GET"] == [f"/ipfs/{CID}"]


def test_a_bad_ipfs_gateway_is_never_asked_and_params_gateway_still_wins(
    tmp_path: Path, mirror: SimpleNamespace, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setenv("IPFS_GATEWAY", f"{mirror.url}/ipfs/ --output=/tmp/x")
    with pytest.raises(StepFailed, match="IPFS_GATEWAY on h is .*--output"):
        check_params(ctx_with(tmp_path))
    assert mirror.requests() == [] and not (tmp_path / "cache" / f"{NAME}.partial").exists()
    note = check_params(ctx_with(tmp_path, mirror.url))
    assert f"downloads from {mirror.url}/ipfs/ (params.gateway)" in note
