"""A bundle server for the lab: webserver.py in a container on the lab's own network.

Hosts reach it at http://<its address on the lab network>:8080; this machine reaches it
there too, and at http://127.0.0.1:<port>, which the hosts cannot reach (their 127.0.0.1
is their own): a URL for testing the fallback to pushing from the controller.
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.errors import NotFound

from rollout.errors import EnvironmentProblem
from rollout.lab.engine import ensure_engine
from rollout.lab.fleet import ADDRESS, LABEL, exec_in, free_odd_ports, lab_prefix
from rollout.lab.image import ensure_host_image

PORT = 8080
ROOT = "/srv/www"
LOG = "/srv/requests.jsonl"
HOLD = "/srv/hold"
RATE = "/srv/rate"


@dataclass(frozen=True)
class WebServer:
    container: str
    address: str  # on the lab network
    host_port: int  # published on this machine's 127.0.0.1

    @property
    def url(self) -> str:
        """The URL the lab hosts (and this machine) use."""
        return f"http://{self.address}:{PORT}"

    @property
    def loopback_url(self) -> str:
        """A URL only this machine can use: the hosts' 127.0.0.1 is their own."""
        return f"http://{ADDRESS}:{self.host_port}"

    def sh(self, command: str) -> str:
        container = ensure_engine().containers.get(self.container)
        code, output = exec_in(container, ["sh", "-c", command])
        if code != 0:
            raise EnvironmentProblem(f"{self.container}: `{command}`: {output!r}")
        return output.decode(errors="replace")

    def requests(self) -> list[dict[str, Any]]:
        text = self.sh(f"cat {LOG} 2>/dev/null; true")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def hold_after(self, nbytes: int) -> None:
        """Every GET stops after `nbytes` of its body until `release_hold()`."""
        self.sh(f"echo {int(nbytes)} > {HOLD}.new && mv {HOLD}.new {HOLD}")

    def release_hold(self) -> None:
        self.sh(f"rm -f {HOLD}")

    def throttle(self, bytes_per_second: int) -> None:
        """Every GET sends its body at about `bytes_per_second` until `unthrottle()`."""
        self.sh(f"echo {int(bytes_per_second)} > {RATE}.new && mv {RATE}.new {RATE}")

    def unthrottle(self) -> None:
        self.sh(f"rm -f {RATE}")

    def path(self, name: str) -> str:
        return f"{ROOT}/{name.lstrip('/')}"


def _script_tar() -> bytes:
    data = (Path(__file__).parent / "webserver.py").read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("srv/webserver.py")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def wait_for_http(url: str, timeout: float = 30.0) -> None:
    """Until the server itself answers (docker-proxy accepts before it listens)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/", timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # an HTTP answer, even 404, is the server
        except OSError:
            time.sleep(0.1)
    raise EnvironmentProblem(f"the lab's bundle server at {url} did not answer")


def start_web_server() -> WebServer:
    """(Re)start the lab's bundle server; the lab must be up (its network exists)."""
    client = ensure_engine()
    name = f"{lab_prefix()}-web"
    with contextlib.suppress(NotFound):
        client.containers.get(name).remove(force=True)
    port = free_odd_ports(1)[0]
    container = client.containers.create(
        ensure_host_image(client), name=name, labels={LABEL: lab_prefix()}, detach=True,
        network=lab_prefix(), ports={f"{PORT}/tcp": (ADDRESS, port)},
        entrypoint=["python3", "/srv/webserver.py", "--root", ROOT, "--log", LOG,
                    "--hold", HOLD, "--rate", RATE, "--port", str(PORT)],
    )  # fmt: skip
    container.put_archive("/", _script_tar())
    container.start()
    container.reload()
    address = container.attrs["NetworkSettings"]["Networks"][lab_prefix()]["IPAddress"]
    server = WebServer(name, address, port)
    wait_for_http(server.loopback_url)
    return server


def stop_web_server(server: WebServer) -> None:
    with contextlib.suppress(NotFound):
        ensure_engine().containers.get(server.container).remove(force=True)
