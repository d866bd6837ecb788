"""A real Prometheus for tests (the pinned build of binaries.py), and tenants it scrapes.

    server = PrometheusServer.start(workdir, config)      # 127.0.0.1, a free port
    server.query("up")                                     # the result list of /api/v1/query
    server.stop()                                          # by its PID

``serve_behind_service(plane, ...)`` makes a tenant's API server proxy HAMi's scheduler metrics
Service to a stand-in on this host, as the lab's tenant proxies to HAMi's pod: a selector-less
Service, its Endpoints, and the Pod they name (fact `kube-service-proxy-url`:
the proxy reads Endpoints, and only to a pod's IP). ``host_address()`` is the address the
stand-in listens on: the API server refuses loopback and link-local endpoints.
"""

from __future__ import annotations

import dataclasses
import fcntl
import ipaddress
import json
import re
import socket
import struct
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from binaries import bin_path
from controlplane import ControlPlane, Process, _require_binaries, free_port, wait_until

SIOCGIFFLAGS, SIOCGIFADDR, IFF_UP = 0x8913, 0x8915, 0x1  # linux/sockios.h, linux/if.h


def host_address() -> str:
    """An IPv4 address of one of this host's interfaces that an Endpoints object may hold (not
    loopback, not link-local), so a stand-in bound to it is reachable by the API server."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name[:15].encode())
            try:
                flags = struct.unpack_from(
                    "H", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, request), 16
                )
                packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)
            except OSError:  # no IPv4 address on it
                continue
            address = ipaddress.ip_address(packed[20:24])
            usable = not (address.is_loopback or address.is_link_local or address.is_unspecified)
            if flags[0] & IFF_UP and usable:  # a down interface's address is not local
                found.append(str(address))
    if not found:
        raise RuntimeError(
            "no IPv4 address other than loopback and link-local on this host: the API server's"
            " service proxy refuses those (fact kube-service-proxy-url). Add one,"
            " e.g. as root: ip link add lab0 type dummy && ip addr add 192.0.2.10/32 dev lab0"
            " && ip link set lab0 up"
        )
    return found[0]


@dataclasses.dataclass
class PrometheusServer:
    workdir: Path
    url: str
    process: Process
    args: list[str]

    @classmethod
    def start(
        cls,
        workdir: Path,
        config: dict[str, Any],
        extra_args: Sequence[str] = (),
        host: str = "127.0.0.1",
    ) -> PrometheusServer:
        _require_binaries([bin_path("prometheus"), bin_path("promtool"), bin_path("tsdb-blocks")])
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        address = f"{host}:{free_port()}"
        args = [
            str(bin_path("prometheus")),
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address={address}",
            *extra_args,
        ]
        server = cls(
            workdir, f"http://{address}", Process("prometheus", args, workdir / "log"), args
        )
        server.run()
        return server

    def run(self) -> None:
        """Start (again) on the same data dir and wait until it is ready."""
        self.process.start()
        wait_until(self._ready, "prometheus /-/ready", 60, [self.process])

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def restart(self) -> None:
        """Stop and start on the same data (it loads blocks added to the data dir meanwhile)."""
        self.process.stop()
        self.run()

    def stop(self) -> None:
        self.process.stop()

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        data = self.api("query", **params)
        assert data["resultType"] == "vector", data
        return data["result"]

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets", state="active")["activeTargets"]

    def wait_for_scrapes(self, count: int = 2, timeout: float = 60) -> list[dict[str, Any]]:
        """Wait until every active target has been scraped ``count`` times from now on."""
        never = "0001-01-01T00:00:00Z"
        seen: dict[str, set[str]] = {}
        first: dict[str, str] = {}

        def done() -> bool:
            targets = self.targets()
            for target in targets:
                key = target["scrapeUrl"] + json.dumps(target["labels"], sort_keys=True)
                first.setdefault(key, target["lastScrape"])
                if target["lastScrape"] not in (never, first[key]):
                    seen.setdefault(key, set()).add(target["lastScrape"])
            return bool(targets) and all(len(seen.get(k, ())) >= count for k in first)

        wait_until(done, f"{count} scrapes of every target", timeout, [self.process])
        return self.targets()


# --- a tenant's HAMi scheduler metrics, through its API server ------------------------------


@dataclasses.dataclass(frozen=True)
class ProxyPath:
    """/api/v1/namespaces/<namespace>/services/<service id>/proxy/<rest>, split."""

    namespace: str
    service_id: str  # [scheme:]name[:port]
    rest: str

    @classmethod
    def parse(cls, path: str) -> ProxyPath:
        parts = path.split("/")
        assert parts[:4] == ["", "api", "v1", "namespaces"] and parts[5] == "services", path
        assert parts[7] == "proxy", path
        return cls(parts[4], parts[6], "/".join(parts[8:]))

    @property
    def service(self) -> str:
        pieces = self.service_id.split(":")
        return pieces[1] if len(pieces) == 3 else pieces[0]

    @property
    def port_name(self) -> str:
        pieces = self.service_id.split(":")
        return pieces[-1] if len(pieces) > 1 else ""


def serve_behind_service(
    plane: ControlPlane, proxy: ProxyPath, host: str, port: int, pod: str = "hami-scheduler"
) -> None:
    """The Service ``proxy`` names, in the plane, its one endpoint ``host:port`` (a program of
    the test on this host), as the lab's cluster has it in front of the pod that serves."""
    ns, name = proxy.namespace, proxy.service

    def apply(body: dict[str, Any]) -> None:
        plane.kubectl("apply", "-f", "-", input=json.dumps(body))

    apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    # A plane without the controller manager has no `default` ServiceAccount to admit a pod.
    apply({"apiVersion": "v1", "kind": "ServiceAccount",
           "metadata": {"name": "default", "namespace": ns}})  # fmt: skip
    pod_name = f"{pod}-stand-in"
    apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name, "namespace": ns},
        # No scheduler of that name: the pod is never bound, and nobody else writes its status.
        "spec": {"schedulerName": "no-scheduler", "containers": [{"name": "s", "image": "x"}]},
    })  # fmt: skip
    status = {"status": {"podIP": host, "podIPs": [{"ip": host}]}}
    plane.kubectl("patch", "pod", pod_name, "-n", ns, "--subresource=status", "--type=merge",
                  "-p", json.dumps(status))  # fmt: skip
    # The id's port is the Service port's name, or its number (the API server finds the name).
    number = proxy.port_name.isdigit()
    port_name = "http" if number or not proxy.port_name else proxy.port_name
    service_port = int(proxy.port_name) if number else 31993
    apply({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": [{"name": port_name, "port": service_port, "targetPort": port}]},
    })  # fmt: skip
    apply({
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": ns},
        "subsets": [{
            "addresses": [
                {"ip": host, "targetRef": {"kind": "Pod", "namespace": ns, "name": pod_name}}
            ],
            "ports": [{"name": port_name, "port": port}],
        }],
    })  # fmt: skip


def reader_token(
    plane: ControlPlane, account: str, proxy: ProxyPath, allowed: Sequence[str] | None
) -> str:
    """A ServiceAccount's token; with ``allowed``, it may `get` services/proxy of those names in
    the proxy's namespace and nothing else."""
    ns = "lab-monitoring"
    plane.kubectl("create", "namespace", ns, check=False)
    plane.kubectl("create", "serviceaccount", account, "-n", ns)
    user = f"system:serviceaccount:{ns}:{account}"
    if allowed is not None:
        names = [f"--resource-name={name}" for name in allowed]
        plane.kubectl("create", "role", account, "-n", proxy.namespace, "--verb=get",
                      "--resource=services/proxy", *names)  # fmt: skip
        plane.kubectl("create", "rolebinding", account, "-n", proxy.namespace,
                      f"--role={account}", f"--serviceaccount={ns}:{account}")  # fmt: skip
        for name in allowed:
            wait_may_proxy(plane, user, dataclasses.replace(proxy, service_id=name))
    return plane.kubectl("create", "token", account, "-n", ns, "--duration=2h").stdout.strip()


def wait_may_proxy(plane: ControlPlane, user: str, proxy: ProxyPath) -> None:
    """Until RBAC lets ``user`` through the proxy of that service id (RBAC decides from
    informer caches, a moment after a binding is made)."""
    what = ("get", f"services/{proxy.service_id}", "--subresource=proxy", "-n", proxy.namespace)
    plane.wait_until_allowed("admin", *what, f"--as={user}")


def write_secret_dir(directory: Path, plane: ControlPlane, token: str) -> Path:
    """What the lab keeps in the tenant's Secret for Prometheus: the CA and the token."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(plane.ca_path.read_bytes())
    (directory / "token").write_text(token)
    return directory


# --- the past, as Prometheus would have stored it -------------------------------------------

# A series' samples: (unix seconds, value), value None for a staleness marker.
SeriesSamples = tuple[dict[str, str], list[tuple[float, float | None]]]


def write_block(data_dir: Path, series: Sequence[SeriesSamples]) -> None:
    """The series into one TSDB block in ``data_dir`` (a stopped Prometheus's, or one it is
    restarted on), staleness markers included (fact
    promtool-backfill-writes-no-staleness-markers)."""
    lines = [
        json.dumps({"labels": labels, "samples": [[round(t * 1000), v] for t, v in samples]})
        for labels, samples in series
    ]
    data_dir.mkdir(parents=True, exist_ok=True)
    command = [str(bin_path("tsdb-blocks")), str(data_dir)]
    text = "\n".join(lines) + "\n"
    result = subprocess.run(command, input=text, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"tsdb-blocks failed: {result.stderr}")


def with_staleness(
    steps: Sequence[float], present: dict[float, float]
) -> list[tuple[float, float | None]]:
    """A series' samples at each evaluation step it has a value, and a staleness marker at the
    first step it has none after having had one: what a scrape or a rule group writes."""
    samples: list[tuple[float, float | None]] = []
    for step in steps:
        if step in present:
            samples.append((step, present[step]))
        elif samples and samples[-1][1] is not None:
            samples.append((step, None))
    return samples


def evaluate_into(
    prometheus: PrometheusServer, record: str, expr: str, steps: Sequence[float]
) -> list[SeriesSamples]:
    """``expr`` evaluated at every step as a rule group evaluates it (an instant query at each
    time: a range query's steps), the results named ``record``, staleness markers where a series
    stops, as the rule group writes them (rules/group.go)."""
    step = steps[1] - steps[0]
    data = prometheus.api("query_range", query=expr, start=f"{steps[0]:.3f}",
                          end=f"{steps[-1]:.3f}", step=f"{step:.3f}")  # fmt: skip
    out: list[SeriesSamples] = []
    for row in data["result"]:
        labels = {**row["metric"], "__name__": record}
        present = {float(t): float(v) for t, v in row["values"]}
        out.append((labels, with_staleness(steps, present)))
    return out


def backfill_rules(
    prometheus: PrometheusServer, rules: Sequence[dict[str, str]], steps: Sequence[float]
) -> None:
    """Record ``rules`` over ``steps`` into the server's storage, as if it had evaluated them
    all along. A rule may read the records of rules before it: those are written (and the
    server restarted to load their block) before it is evaluated."""
    batch: list[SeriesSamples] = []
    pending: set[str] = set()
    for rule in rules:
        assert set(rule) == {"record", "expr"}, rule  # no labels: not played here
        if any(re.search(rf"\b{re.escape(record)}\b", rule["expr"]) for record in pending):
            _load(prometheus, batch)
            batch, pending = [], set()
        batch += evaluate_into(prometheus, rule["record"], rule["expr"], steps)
        pending.add(rule["record"])
    _load(prometheus, batch)


def _load(prometheus: PrometheusServer, series: Sequence[SeriesSamples]) -> None:
    if series:
        prometheus.stop()
        write_block(prometheus.workdir / "data", series)
        prometheus.run()
