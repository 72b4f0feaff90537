"""Preflight's proof-parameter check, run against this machine (a local host agent, real temp
folders, a web server on 127.0.0.1 serving by CID): files verified in place by size and
digest, reused from curio's folder by a link, downloaded by CID (resumed), pushed only on
request and hashed once a run; a truncated or corrupted file refused with both figures."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from contexts import AgentTransport, lab_playbook, small_host

from rollout.config.sections import ParamsSpec
from rollout.errors import StepFailed
from rollout.host.layout import Layout
from rollout.lab.webserver import Handler
from rollout.steps.base import HostContext
from rollout.steps.params import check_params

NAME = "v28-test.params"
DATA = bytes(range(256)) * 64  # 16 KiB
DIGEST = hashlib.blake2b(DATA).hexdigest()[:32]  # filecoin-proofs': blake2b-512, 16 bytes
CID = "bafkreifakecidforthetestsonlyaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"


def blake(data: bytes) -> str:
    return hashlib.blake2b(data).hexdigest()[:32]


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[SimpleNamespace]:
    """A mirror on 127.0.0.1 serving DATA at /ipfs/CID (Range requests honoured)."""
    root = tmp_path / "www"
    (root / "ipfs").mkdir(parents=True)
    (root / "ipfs" / CID).write_bytes(DATA)
    log = tmp_path / "requests.jsonl"
    Handler.opts = SimpleNamespace(root=str(root), log=str(log), hold=str(tmp_path / "hold"))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield SimpleNamespace(url=f"http://127.0.0.1:{httpd.server_address[1]}", root=root,
                          requests=lambda: [json.loads(line) for line in
                                            log.read_text().splitlines()] if log.exists() else [])
    httpd.shutdown()
    httpd.server_close()


def context(tmp: Path, cache: str = "cache", **params: Any) -> HostContext:
    """A step context on this machine: the lab playbook's settings with these params and
    param_cache under `tmp`."""
    params.setdefault("reuse", [str(tmp / "curio")])
    params.setdefault("gateway", "http://127.0.0.1:9")  # nothing listens: never asked
    base = lab_playbook()
    settings = base.model_copy(update={
        "params": ParamsSpec.model_validate(params),
        "daemon": base.daemon.model_copy(update={"param_cache": str(tmp / cache)}),
    })
    host = small_host("h")
    return HostContext(host, AgentTransport("h"), Layout(str(tmp / "root")), settings=settings)


def entry(**extra: Any) -> dict[str, Any]:
    return {"name": NAME, "cid": CID, "digest": DIGEST, **extra}


def put(folder: Path, data: bytes, name: str = NAME) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    return folder / name


def test_a_file_in_param_cache_is_verified_by_its_digest(tmp_path: Path) -> None:
    put(tmp_path / "cache", DATA)
    ctx = context(tmp_path, files=[entry(size=len(DATA))])
    assert check_params(ctx) == f"params in {tmp_path / 'cache'}: {NAME} present, verified"
    seen = json.loads((tmp_path / "cache" / ".verified.json").read_text())
    assert seen[str(tmp_path / "cache" / NAME)][0] == f"blake2b:{DIGEST}"  # not hashed again


def test_a_truncated_file_is_refused_by_size_naming_both_figures(tmp_path: Path) -> None:
    put(tmp_path / "cache", DATA[:1000])
    ctx = context(tmp_path, files=[entry(size=len(DATA))])
    with pytest.raises(StepFailed) as err:
        check_params(ctx)
    assert f"{tmp_path / 'cache' / NAME}: 1000 bytes, expected {len(DATA)}" in str(err.value)
    assert "refused by size" in str(err.value) and not err.value.retryable
    assert (tmp_path / "cache" / NAME).stat().st_size == 1000  # refused, not replaced


def test_a_corrupted_file_is_refused_by_digest_naming_both_digests(tmp_path: Path) -> None:
    bad = bytes([DATA[0] ^ 1]) + DATA[1:]
    put(tmp_path / "cache", bad)
    ctx = context(tmp_path, files=[entry()])  # no size: the digest alone decides
    with pytest.raises(StepFailed) as err:
        check_params(ctx)
    assert f"blake2b {blake(bad)}, expected {DIGEST}" in str(err.value)
    assert NAME in str(err.value) and "refused by digest" in str(err.value)


def test_a_file_in_curios_folder_is_used_in_place_by_a_link(tmp_path: Path) -> None:
    there = put(tmp_path / "curio", DATA)
    ctx = context(tmp_path, files=[entry(size=len(DATA))])
    note = check_params(ctx)
    assert f"{NAME} reused in place from {there}, verified" in note
    linked = tmp_path / "cache" / NAME
    assert linked.is_symlink() and linked.resolve() == there  # not copied
    assert "present" in check_params(ctx)  # the link is checked where it points


def test_a_corrupted_file_in_curios_folder_is_refused(tmp_path: Path) -> None:
    put(tmp_path / "curio", b"z" * len(DATA))
    with pytest.raises(StepFailed, match=f"curio/{NAME}: blake2b {blake(b'z' * len(DATA))}"):
        check_params(context(tmp_path, files=[entry()]))
    assert not (tmp_path / "cache" / NAME).exists()


def test_fil_proofs_parameter_cache_on_the_host_is_looked_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    there = put(tmp_path / "elsewhere", DATA)
    monkeypatch.setenv("FIL_PROOFS_PARAMETER_CACHE", str(tmp_path / "elsewhere"))
    assert f"reused in place from {there}" in check_params(context(tmp_path, files=[entry()]))


def test_a_missing_file_is_downloaded_by_cid_resumed_and_checked(
    tmp_path: Path, mirror: SimpleNamespace
) -> None:
    put(tmp_path / "cache", DATA[:5000], f"{NAME}.partial")  # an earlier try's bytes
    ctx = context(tmp_path, gateway=mirror.url + "/", files=[entry(size=len(DATA))])
    note = check_params(ctx)
    assert f"{NAME} downloaded ({len(DATA) - 5000} bytes, resumed at 5000 bytes)" in note
    assert (tmp_path / "cache" / NAME).read_bytes() == DATA
    assert not (tmp_path / "cache" / f"{NAME}.partial").exists()
    gets = [r for r in mirror.requests() if r["method"] == "GET"]
    assert [(r["path"], r["range"]) for r in gets] == [(f"/ipfs/{CID}", "bytes=5000-")]


def test_a_file_of_unknown_size_takes_the_servers_and_its_digest(
    tmp_path: Path, mirror: SimpleNamespace
) -> None:
    ctx = context(tmp_path, gateway=mirror.url, files=[entry()])
    assert f"{NAME} downloaded ({len(DATA)} bytes)" in check_params(ctx)
    assert (tmp_path / "cache" / NAME).read_bytes() == DATA


def test_a_mirror_serving_other_bytes_is_refused_and_nothing_kept(
    tmp_path: Path, mirror: SimpleNamespace
) -> None:
    (mirror.root / "ipfs" / CID).write_bytes(b"q" * len(DATA))
    ctx = context(tmp_path, gateway=mirror.url, files=[entry(size=len(DATA))])
    with pytest.raises(StepFailed) as err:
        check_params(ctx)
    assert f"blake2b {blake(b'q' * len(DATA))}, expected {DIGEST}" in str(err.value)
    assert not list((tmp_path / "cache").glob(f"{NAME}*"))


def test_an_unreachable_gateway_lists_the_missing_files(tmp_path: Path) -> None:
    ctx = context(tmp_path, files=[entry(), {"name": "v.vk", "cid": CID, "digest": DIGEST}])
    with pytest.raises(StepFailed) as err:
        check_params(ctx)
    said = str(err.value)
    assert f"{NAME} (missing), v.vk (missing)" in said and "http://127.0.0.1:9" in said
    assert "params.source" in said  # how else to get them there


def test_nothing_is_pushed_by_default(tmp_path: Path) -> None:
    assert ParamsSpec().source is None
    with pytest.raises(ValueError, match="params.gateway"):
        ParamsSpec(source="https://example.invalid/params")


def test_a_pushed_source_is_hashed_once_per_run_for_every_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "source"
    put(folder, DATA)
    hashed: list[str] = []
    real = hashlib.blake2b

    def counting(*args: Any, **kwargs: Any) -> Any:
        hashed.append("blake2b")
        return real(*args, **kwargs)

    monkeypatch.setattr(hashlib, "blake2b", counting)
    for host in ("h1", "h2", "h3"):
        ctx = context(tmp_path, cache=host, source=str(folder), files=[entry()])
        assert "staged from the controller, blake2b verified" in check_params(ctx)
        assert (tmp_path / host / NAME).read_bytes() == DATA
    assert hashed == ["blake2b"]


def test_a_source_that_is_not_the_manifests_is_never_pushed(tmp_path: Path) -> None:
    folder = tmp_path / "source"
    put(folder, b"w" * 10)
    ctx = context(tmp_path, source=str(folder), files=[entry()])
    with pytest.raises(StepFailed, match=f"blake2b {blake(b'w' * 10)}, expected {DIGEST}"):
        check_params(ctx)
    assert not (tmp_path / "cache" / f"{NAME}.partial").exists()


def test_a_pushed_partial_that_is_not_a_prefix_fails_its_sha256_and_is_dropped(
    tmp_path: Path,
) -> None:
    data = b"x" * 5000
    folder = tmp_path / "source"
    put(folder, data)
    ctx = context(tmp_path, source=str(folder), files=[{"name": NAME, "size": len(data)}])
    put(tmp_path / "cache", b"y" * 100, f"{NAME}.partial")
    with pytest.raises(StepFailed, match="sha256"):
        check_params(ctx)  # no digest in the manifest: the local source's sha256 is used
    assert not (tmp_path / "cache" / f"{NAME}.partial").exists()
    assert not (tmp_path / "cache" / NAME).exists()
    assert "resumed" not in check_params(ctx)
    assert (tmp_path / "cache" / NAME).read_bytes() == data


def test_a_partial_push_is_resumed(tmp_path: Path) -> None:
    folder = tmp_path / "source"
    put(folder, DATA)
    put(tmp_path / "cache", DATA[:1000], f"{NAME}.partial")
    ctx = context(tmp_path, source=str(folder), files=[entry(size=len(DATA))])
    assert "resumed at 1000 bytes, blake2b verified" in check_params(ctx)
    assert (tmp_path / "cache" / NAME).read_bytes() == DATA


def test_no_room_for_the_pce_file_fails_before_anything_is_copied(tmp_path: Path) -> None:
    ctx = context(tmp_path, files=[entry()], pce_bytes="1000000GiB")
    put(tmp_path / "cache", DATA)
    with pytest.raises(StepFailed, match="for the PCE file"):
        check_params(ctx)
    (tmp_path / "cache" / "pce-porep-32g.bin").write_bytes(b"pce")  # already written
    assert "present" in check_params(ctx)


@pytest.mark.parametrize("manifest_size", [len(DATA), None])
def test_a_download_reports_its_progress_even_where_the_manifest_has_no_size(
    tmp_path: Path, mirror: SimpleNamespace, manifest_size: int | None
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    ctx = context(tmp_path, gateway=mirror.url, files=[entry(size=manifest_size)])
    ctx.emit = lambda kind, **fields: events.append((kind, fields))
    check_params(ctx)
    progress = [f["data"] for kind, f in events if kind == "progress"]
    assert progress and all(f["step"] == "preflight" for k, f in events if k == "progress")
    assert progress[-1]["bytes"] == progress[-1]["total"] == len(DATA)
