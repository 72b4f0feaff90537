"""A vast.ai fleet as an inventory: the account's instances, read through the `vastai`
package (rollout's optional extra `vastai`), become hosts.

`--hosts vastai:LABEL`, or `vastai: {label: LABEL}` in fleet.yaml, takes the running
instances whose label is LABEL (or matches it as a glob); the others are listed as
skipped, each with its reason. An instance's SSH address changes when vast.ai recreates
it, so it is read at every load, never written down.

Everything the API answers is hostile data: the whole listing has a deadline, each page
is bounded in size, each instance is validated on its own (one that does not validate,
or holds a control character in any text, is skipped with its reason: the others are
hosts), and a host's name, address and port are checked before they are used; text from
the answer appears in messages only escaped and cut short.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    ValidationError,
)

from rollout.errors import ConfigError, EnvironmentProblem, Location, UserError
from rollout.failures import url_failure
from rollout.readfile import UnreadableFile, read_bytes
from rollout.secrets import redact, register

PREFIX = "vastai:"
KEY_ENV = "VAST_API_KEY"
PIP_FIX = "pip install vastai==1.9.1 (rollout's optional extra `vastai`)"
INSTANCES_PATH = "/api/v1/instances/"
PAGE_LIMIT = 25  # rows per page, as the package's own show_instances asks
MAX_PAGES = 200
MAX_PAGE_BYTES = 4 * 1024 * 1024
MAX_KEY_BYTES = 4096
REQUEST_TIMEOUT = 30.0  # seconds per connect and per read, within LIST_DEADLINE
LIST_DEADLINE = 90.0  # seconds for the whole list (every page), however slowly it comes
RETRIES = 3  # tries of one page on 429, 502-504 or a lost connection, as the package does
RETRYABLE = frozenset({429, 502, 503, 504})
NAME_MAX = 63

if TYPE_CHECKING:
    import urllib3
    from tenacity import RetryCallState


def _no_control(text: str) -> str:
    """Text from the API holds no control character (C0, DEL, C1; tab and newline too):
    none may reach a template, a host var or the console."""
    if any(unicodedata.category(c) == "Cc" for c in text):
        raise ValueError("holds a control character")
    return text


AddressMode = Literal["proxy", "direct"]
GroupName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]+$")]
Text = Annotated[str, StringConstraints(max_length=1024), AfterValidator(_no_control)]
ShortText = Annotated[str, StringConstraints(max_length=256), AfterValidator(_no_control)]


class VastaiSource(BaseModel):
    """The instances of a vast.ai account, as hosts (needs `pip install vastai==1.9.1`;
    the API key comes from $VAST_API_KEY or vastai's key file). Only running instances
    whose label matches are hosts, each as root with the vars `gpu_count`, `gpu_model`,
    `vast_id` and `vast_label`; `defaults` apply to them as to any host."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(
        min_length=1,
        max_length=256,
        description="The instances' label: exact, or a glob (`prover-*`; `*`: every instance).",
    )
    address: AddressMode = Field(
        default="proxy",
        description="`proxy`: vast.ai's SSH proxy (`sshN.vast.ai` and its port). `direct`: "
        "the instance's public IP and the host port mapped to its 22/tcp.",
    )
    groups: list[GroupName] = Field(
        default_factory=lambda: ["vastai"],
        description="Groups of these hosts (for --limit).",
    )


# The API's rows are validated only where a vast.ai inventory is read: their validators are
# built then (defer_build), not at every command's start (start-up time).
class _Binding(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    HostIp: ShortText | None = None  # noqa: N815 (the API's own name)
    HostPort: ShortText | StrictInt | None = None  # noqa: N815


class Instance(BaseModel):
    """The fields of one row of GET /api/v1/instances/ that make a host; others ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    id: StrictInt = Field(ge=0)
    label: Text | None = None
    actual_status: ShortText | None = None
    intended_status: ShortText | None = None
    ssh_host: ShortText | None = None
    ssh_port: StrictInt | None = None
    public_ipaddr: ShortText | None = None
    ports: dict[ShortText, list[_Binding] | None] | None = Field(default=None, max_length=512)
    image_runtype: ShortText | None = None
    num_gpus: StrictInt | None = Field(default=None, ge=0, le=4096)
    gpu_name: ShortText | None = None


class _Page(BaseModel):
    """A page: its rows are validated one by one (`_row`), not here."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    instances: list[Any] | None = Field(default=None, max_length=1000)
    next_token: ShortText | StrictInt | None = None


@dataclass(frozen=True)
class BadRow:
    """A row of the list that is no usable instance: its id and label where they are an
    int and a str (the label only to match it, never shown raw), and what is wrong."""

    id: int | None
    label: str | None
    problem: str


@dataclass(frozen=True)
class VastHost:
    """An instance made a host: plain data for the inventory's HostEntry."""

    name: str
    address: str
    port: int
    groups: tuple[str, ...]
    vars: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class VastFleet:
    hosts: list[VastHost]
    skipped: list[str]  # one line per matching instance left out, with its reason
    refused: dict[str, str] = field(default_factory=dict)
    """Matching rows that do not validate (hostile or broken): host name -> why, each a
    failed host of its own."""


PageGetter = Callable[[dict[str, Any]], tuple[int, bytes]]
"""One GET of INSTANCES_PATH with these query args: (HTTP status, body)."""


def parse_ref(ref: str) -> VastaiSource:
    """`vastai:LABEL` (the form --hosts takes) as a source; a bad one is a UserError."""
    label = ref.removeprefix(PREFIX)
    try:
        return VastaiSource(label=label)
    except ValidationError:
        raise UserError(
            f"--hosts {_shown(ref)}: expected vastai:LABEL with a label of 1 to 256 "
            "characters (exact, or a glob such as vastai:prover-*)"
        ) from None


def is_ref(hosts: str) -> bool:
    return hosts.startswith(PREFIX)


def load_fleet(source: VastaiSource, where: Location) -> VastFleet:
    """The hosts of `source`, read from the API now. No key: UserError; no package, an
    API that cannot be reached, answers nonsense or not within LIST_DEADLINE:
    EnvironmentProblem; no running instance matches: ConfigError at `where`. A matching
    instance that does not validate is refused with its reason (that host fails alone);
    the others are hosts."""
    rows = fetch_instances(open_api(api_key()))
    fleet = select(rows, source)
    if not fleet.hosts:
        left_out = [*fleet.skipped, *(f"{n}: {why}" for n, why in fleet.refused.items())]
        listed = "; ".join(left_out) or "none has that label"
        raise ConfigError(
            f"no running vast.ai instance is labelled {_shown(source.label)} "
            f"({len(rows)} instances listed; {listed})",
            where,
        )
    return fleet


# --- the API key -------------------------------------------------------------------


def key_files() -> list[Path]:
    """Where the vastai package (1.9.1, `_base._resolve_api_key`) keeps the key, in order."""
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [Path(config) / "vastai" / "vast_api_key", Path.home() / ".vast_api_key"]


def api_key() -> str:
    """$VAST_API_KEY, else vastai's key files; registered as a secret (masked in output)."""
    key = os.environ.get(KEY_ENV, "").strip()
    for path in [] if key else key_files():
        key = _read_key(path)
        if key:
            break
    if not key:
        files = " or ".join(str(p) for p in key_files())
        raise UserError(
            f"no vast.ai API key: set {KEY_ENV}, or save the key to {files} "
            "(`vastai set api-key KEY` does)"
        )
    register(key)
    return key


def _read_key(path: Path) -> str:
    if not path.exists() and not path.is_symlink():
        return ""
    try:
        data = read_bytes(path, "the vast.ai API key file", limit=MAX_KEY_BYTES)
    except UnreadableFile as exc:
        raise UserError(f"cannot read the vast.ai API key file {path}: {exc.why}") from None
    if not data.strip():
        raise UserError(f"the vast.ai API key file {path} does not hold a key")
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise UserError(f"the vast.ai API key file {path} does not hold a key") from None


# --- the API -----------------------------------------------------------------------


def open_api(key: str, deadline: float | None = None) -> PageGetter:
    """A page getter on the vastai package's HTTP client (its URLs, auth header and
    redirects kept within vast.ai), each page streamed and cut at MAX_PAGE_BYTES; every
    page it gets ends by `deadline` (a time.monotonic() value; default LIST_DEADLINE
    seconds from now), however slowly the server sends. A page is tried again on 429,
    502-504 or a lost connection. The package missing is an EnvironmentProblem."""
    try:
        from vastai import VastAI
        from vastai.api.client import VastSession
    except ImportError:
        raise EnvironmentProblem(
            f"reading a vast.ai fleet needs the vastai package: {PIP_FIX}"
        ) from None
    import requests
    from tenacity import Retrying, retry_if_exception_type, retry_if_result, stop_after_attempt

    client = VastAI(api_key=key, retry=RETRIES).client
    end = time.monotonic() + LIST_DEADLINE if deadline is None else deadline

    def once(url: str) -> tuple[int, bytes, str | None]:
        session = VastSession(client.server_url)
        prep = session.prepare_request(
            requests.Request("GET", url, headers=client._build_headers()))
        wait = min(REQUEST_TIMEOUT, _left(end))
        with session.send(prep, stream=True, timeout=(wait, wait)) as response:
            body = _read_page(response.raw, end)
            return int(response.status_code), body, response.headers.get("Retry-After")

    def get(query: dict[str, Any]) -> tuple[int, bytes]:
        retrying = Retrying(
            stop=stop_after_attempt(RETRIES),
            wait=lambda state: min(_backoff(state), _left(end)),
            retry=retry_if_exception_type((requests.ConnectionError, requests.Timeout))
            | retry_if_result(lambda answer: answer[0] in RETRYABLE),
            retry_error_callback=_last_answer,
        )
        status, body, _ = retrying(once, client._build_url(INSTANCES_PATH, query))
        return status, body

    return get


def _left(deadline: float) -> float:
    """Seconds until `deadline`; none left is an EnvironmentProblem."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise EnvironmentProblem(
            f"the vast.ai API did not list the instances within {LIST_DEADLINE:g} s (it "
            "answers too slowly or not at all)")
    return left


def _read_page(raw: urllib3.BaseHTTPResponse, deadline: float) -> bytes:
    """At most MAX_PAGE_BYTES + 1 bytes of a body, by `deadline`: a server that sends a
    byte every few seconds never trips a per-read timeout, and is cut here."""
    body = bytearray()
    while len(body) <= MAX_PAGE_BYTES:
        _left(deadline)
        chunk = raw.read1(64 * 1024, decode_content=True)
        if not chunk:
            break
        body += chunk
    return bytes(body[: MAX_PAGE_BYTES + 1])


def _last_answer(state: RetryCallState) -> Any:
    """After the last try: its answer, or its error raised, as the package gives them."""
    assert state.outcome is not None
    return state.outcome.result()


def _backoff(state: RetryCallState) -> float:
    """The wait before the next try: the server's Retry-After, else 0.15 s growing 1.5x."""
    outcome = state.outcome
    after = None if outcome is None or outcome.failed else outcome.result()[2]
    return _retry_after(after, 0.15 * 1.5 ** (state.attempt_number - 1))


def _retry_after(value: str | None, default: float) -> float:
    """The server's Retry-After in seconds, when it is a number of at most 60."""
    try:
        wait = float(value) if value is not None else default
    except ValueError:
        return default
    return wait if 0 <= wait <= 60 else default


def fetch_instances(get: PageGetter) -> list[Instance | BadRow]:
    """Every row of the account's list, page by page (at most MAX_PAGES): an Instance, or
    a BadRow for one that does not validate."""
    query: dict[str, Any] = {
        "select_filters": {},
        "order_by": [{"col": "id", "dir": "asc"}],
        "limit": PAGE_LIMIT,
    }
    rows: list[Instance | BadRow] = []
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page = _page(_get(get, query))
        rows += [_row(raw) for raw in page.instances or []]
        token = page.next_token
        if token is None or token == "":
            return rows
        if str(token) in seen:
            raise _malformed("next_token repeats an earlier page's")
        seen.add(str(token))
        query = {**query, "after_token": token}
    raise _malformed(f"more than {MAX_PAGES} pages of {PAGE_LIMIT} instances")


def _get(get: PageGetter, query: dict[str, Any]) -> bytes:
    try:
        status, body = get(query)
    except EnvironmentProblem:
        raise
    except Exception as exc:  # requests' errors, or the package's own: in words, no library text
        raise url_failure(EnvironmentProblem, f"the vast.ai API's {INSTANCES_PATH}", exc) from None
    if status in (401, 403):
        raise UserError(
            f"the vast.ai API refused the key (HTTP {status}): check {KEY_ENV} or "
            "vastai's key file"
        )
    if status != 200:
        raise EnvironmentProblem(
            f"the vast.ai API answered HTTP {status}: "
            f"{_shown(redact(body.decode('utf-8', 'replace')))}"
        )
    if len(body) > MAX_PAGE_BYTES:
        raise _malformed(f"a page is larger than {MAX_PAGE_BYTES} bytes")
    return body


def _page(body: bytes) -> _Page:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise _malformed("not JSON") from None
    if not isinstance(data, dict):
        raise _malformed(f"a JSON {type(data).__name__}, not an object")
    try:
        return _Page.model_validate(data)
    except ValidationError as exc:
        raise _malformed(_first_problem(exc)) from None


def _row(raw: Any) -> Instance | BadRow:
    """One row of a page, validated on its own: a row that does not is a BadRow."""
    try:
        return Instance.model_validate(raw)
    except ValidationError as exc:
        fields = raw if isinstance(raw, dict) else {}
        id_, label = fields.get("id"), fields.get("label")
        return BadRow(id_ if type(id_) is int and id_ >= 0 else None,
                      label if isinstance(label, str) else None, _first_problem(exc))


def _first_problem(exc: ValidationError) -> str:
    """The first error, its place escaped (a key of the answer is hostile text) and its
    message; never the value itself."""
    err = exc.errors(include_url=False)[0]
    where = "".join(f"[{seg}]" if isinstance(seg, int) else f".{seg}" for seg in err["loc"])
    message = err["msg"].removeprefix("Value error, ")
    return f"{_shown(where.lstrip('.'), 60).strip(chr(39))}: {message}"


def _malformed(what: str) -> EnvironmentProblem:
    return EnvironmentProblem(f"the vast.ai API's list of instances is malformed: {what}")


# --- instances -> hosts ------------------------------------------------------------


def select(rows: list[Instance | BadRow], source: VastaiSource) -> VastFleet:
    """The running instances whose label matches, as hosts; the other matching ones,
    and the rows that do not validate, skipped with a reason. Pure: no I/O."""
    matching = [row for row in rows if label_matches(row.label, source.label)]
    names = host_names([row for row in matching if row.id is not None])
    hosts: list[VastHost] = []
    skipped: list[str] = []
    refused: dict[str, str] = {}
    for row in matching:
        if row.id is None:
            skipped.append(f"an instance without a usable id: {_why_not(row, source.address)[0]}")
            continue
        reason, address, port = _why_not(row, source.address)
        if reason and _hostile(row, address):
            refused[names[row.id]] = f"vast.ai instance {row.id}: {reason}"
        elif reason or names[row.id] in {host.name for host in hosts}:
            why = reason or "another instance has its name"
            skipped.append(f"{names[row.id]} (instance {row.id}): {why}")
        elif isinstance(row, Instance):  # a BadRow always has a reason
            hosts.append(VastHost(names[row.id], address, port, tuple(source.groups),
                                  _vars(row)))
    return VastFleet(hosts, skipped, refused)


def label_matches(label: str | None, pattern: str) -> bool:
    value = label or ""
    return value == pattern or fnmatchcase(value, pattern)


def host_names(rows: list[Instance | BadRow]) -> dict[int, str]:
    """A name per instance from its label ([A-Za-z0-9._-], at most 63 characters); a
    label that is missing, or that two instances share, also gets the instance id."""
    ids = [row.id for row in rows if row.id is not None]
    safe = {row.id: _safe_name(row.label or "") for row in rows if row.id is not None}
    counts = Counter(safe.values())
    out: dict[int, str] = {}
    for id_ in ids:
        base = safe[id_]
        if base and counts[base] == 1:
            out[id_] = base
        else:
            out[id_] = f"{(base or 'vast')[: NAME_MAX - 12]}-{id_}"
    taken = Counter(out.values())  # a label can spell another's name-id: then vast-ID
    return {id_: f"vast-{id_}" if taken[name] > 1 else name for id_, name in out.items()}


def _safe_name(label: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-.")
    return name[:NAME_MAX]


def _why_not(row: Instance | BadRow, mode: AddressMode) -> tuple[str, str, int]:
    """(reason it is left out, or ""; its SSH address; its SSH port). An address that is
    there but no host name or IP, or a port out of range, comes back with the reason (the
    address given), for `_hostile`."""
    if isinstance(row, BadRow):
        return f"its row does not validate ({row.problem})", "", 0
    if row.actual_status != "running":
        return f"not running (actual_status {_shown(row.actual_status)})", "", 0
    address, port = _direct(row) if mode == "direct" else _proxy(row)
    if mode == "direct" and not port:
        return "no direct SSH port (no host port mapped to 22/tcp)", "", 0
    if not address or not _is_host(address):
        return f"no usable {mode} SSH address ({_shown(address)})", address or "", 0
    if not 1 <= port <= 65535:
        return f"no usable {mode} SSH port ({port})", address, port
    return "", address, port


def _hostile(row: Instance | BadRow, address: str) -> bool:
    """A row left out for what it holds (it does not validate, its address is no host name
    or IP, its port is out of range), not for its state (not running, no address or port
    yet): that host is refused, a failure of its own, where one in such a state is skipped."""
    return isinstance(row, BadRow) or bool(address)


def _proxy(row: Instance) -> tuple[str | None, int]:
    """sshN.vast.ai and ssh_port; a Jupyter-runtime instance's SSH is one port above
    (as `vastai ssh-url` computes it)."""
    port = row.ssh_port or 0
    if port and "jupyter" in (row.image_runtype or ""):
        port += 1
    return row.ssh_host, port


def _direct(row: Instance) -> tuple[str | None, int]:
    bindings = (row.ports or {}).get("22/tcp") or []
    raw = bindings[0].HostPort if bindings else None
    text = str(raw) if raw is not None else ""
    return row.public_ipaddr, int(text) if text.isdigit() and len(text) <= 5 else 0


def _is_host(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
        return True
    except ValueError:
        return re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9-]{1,63})*", address) \
            is not None and len(address) <= 253


def _vars(row: Instance) -> dict[str, Any]:
    return {
        "gpu_count": row.num_gpus or 0,
        "gpu_model": row.gpu_name or "",
        "vast_id": row.id,
        "vast_label": row.label or "",
    }


def _shown(value: object, limit: int = 80) -> str:
    """A value from outside, escaped (ascii(): no control or non-ASCII characters) and
    cut short."""
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
