"""Per-run state and fixtures shared by checks (clusters, namespaces, test pods)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import quote

from .cluster import (
    NO_SERVICE_ACCOUNT_CAUSE,
    Cluster,
    ClusterError,
    ClusterFactory,
    Obj,
    likely_cause,
)
from .hami import pending_reason
from .objects import Created, Tracker, run_labels, tools_pod
from .placement import TenantMap
from .result import CheckFailed
from .spec import Spec, Tenant, Timeouts
from .waiting import Clock, WaitTimeout, wait_for

T = TypeVar("T")


def pod_summary(pod: Obj) -> str:
    st = pod.get("status", {})
    phase = st.get("phase", "?")
    node = pod.get("spec", {}).get("nodeName") or "-"
    extra = ""
    for cs in st.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            extra = f", {waiting.get('reason', '')}"
    if phase == "Pending" and node == "-":
        reason = pending_reason(pod, [])
        if reason:
            extra = f", {reason}"
    return f"phase {phase} on {node}{extra}"


def default_service_account_probe(
    cl: Cluster, namespace: str
) -> Callable[[], tuple[bool | None, str]]:
    """A wait_for probe: done once the namespace's default ServiceAccount exists, which pod
    admission needs (upstream fact `kube-pod-admission-needs-service-account`)."""
    path = f"/api/v1/namespaces/{quote(namespace)}/serviceaccounts/default"

    def probe() -> tuple[bool | None, str]:
        try:
            cl.get_raw(path)
        except ClusterError as exc:
            if exc.status != 404:
                raise
            return None, str(exc)
        return True, ""

    return probe


@dataclass
class RunContext:
    spec: Spec
    factory: ClusterFactory
    clock: Clock
    run_id: str
    tracker: Tracker = field(default_factory=Tracker)
    poll_seconds: float = 1.0
    _clusters: dict[str, Cluster] = field(default_factory=dict)
    _namespaces: dict[str, str] = field(default_factory=dict)
    _pods_admitted: set[str] = field(default_factory=set)  # tenants whose namespace takes pods
    _tools: dict[str, Obj | CheckFailed] = field(default_factory=dict)
    # tenant -> seconds waited for HAMi's webhook endpoints, or why they never came
    webhook_waits: dict[str, float | CheckFailed] = field(default_factory=dict)
    # tenant -> (pod, hami node annotation, spec.nodeName) of every GPU pod placed this run
    placements: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    # tenant -> what gpu.placement reports and draws: the peak below, else the live cards
    card_maps: dict[str, TenantMap] = field(default_factory=dict)
    # tenant -> the fullest cards a GPU check's batch left (most pod segments; ties: the later),
    # read once all its pods were allocated, before the check deleted them
    peak_maps: dict[str, TenantMap] = field(default_factory=dict)
    # tenant -> "cards not read during <check>: <error>", for gpu.placement to report
    snapshot_problems: dict[str, list[str]] = field(default_factory=dict)
    check: str = ""  # the id of the check running now (set by the runner)

    @property
    def timeouts(self) -> Timeouts:
        return self.spec.timeouts

    # clusters -------------------------------------------------------------------------
    def mgmt(self) -> Cluster:
        return self._cluster("management", self.spec.management.kubeconfig)

    def tenant(self, t: Tenant) -> Cluster:
        return self._cluster(t.name, t.kubeconfig)

    def _cluster(self, key: str, kubeconfig: dict) -> Cluster:
        if key not in self._clusters:
            self._clusters[key] = self.factory(kubeconfig, key)
        return self._clusters[key]

    # waiting ----------------------------------------------------------------------------
    def wait(self, probe: Callable[[], tuple[T | None, str]], what: str, timeout: float) -> T:
        return wait_for(
            probe, what=what, timeout=timeout, clock=self.clock, interval=self.poll_seconds
        )

    # objects ------------------------------------------------------------------------------
    def namespace(self, t: Tenant) -> str:
        """The per-run namespace in a tenant, created on first use, once pods can be created in
        it (its default ServiceAccount exists)."""
        return self._run_namespace(t.name, self.tenant(t))

    def management_namespace(self) -> str:
        """The same in the management cluster (a key no tenant name can be: not a DNS label)."""
        return self._run_namespace("(management)", self.mgmt())

    def _run_namespace(self, key: str, cl: Cluster) -> str:
        if key not in self._namespaces:
            name = f"labcheck-{self.run_id}"
            cl.create_namespace(name, run_labels(self.run_id))
            self.tracker.add(Created(cl, "namespace", name))
            self._namespaces[key] = name
        if key not in self._pods_admitted:
            self._await_default_service_account(cl, self._namespaces[key])
            self._pods_admitted.add(key)
        return self._namespaces[key]

    def _await_default_service_account(self, cl: Cluster, namespace: str) -> None:
        # Pod admission refuses every pod of a namespace without it (and retries only ~1-2 s).
        try:
            self.wait(
                default_service_account_probe(cl, namespace),
                f"ServiceAccount {namespace}/default",
                self.timeouts.api_seconds,
            )
        except WaitTimeout as exc:
            raise CheckFailed(
                f"ServiceAccount {namespace}/default within {exc.timeout:g}s",
                exc.last,
                NO_SERVICE_ACCOUNT_CAUSE,
            ) from None

    def pod_name(self, short: str, i: int | None = None) -> str:
        base = f"lc-{self.run_id}-{short}"
        return base if i is None else f"{base}-{i}"

    def create_pod(self, cl: Cluster, namespace: str, body: Obj) -> Obj:
        created = cl.create_pod(namespace, body)
        # Track by the exact name we chose, so cleanup can never hit a foreign pod.
        self.tracker.add(Created(cl, "pod", body["metadata"]["name"], namespace))
        return created

    def delete_pods(self, cl: Cluster, namespace: str, names: list[str]) -> None:
        """Delete our pods and wait (bounded) until they are gone, so GPU usage is freed."""
        for n in names:
            try:
                cl.delete_pod(namespace, n)
            except ClusterError as exc:
                if exc.status != 404:
                    raise
        remaining = set(names)

        def gone() -> tuple[bool | None, str]:
            for n in sorted(remaining):
                try:
                    cl.get_pod(namespace, n)
                except ClusterError as exc:
                    if exc.status == 404:
                        remaining.discard(n)
                        continue
                    raise
            return (True if not remaining else None), f"still present: {sorted(remaining)}"

        self.wait(gone, "test pods deleted", self.timeouts.pod_seconds)
        for item in list(self.tracker.items):
            if (
                item.cluster is cl
                and item.kind == "pod"
                and item.namespace == namespace
                and item.name in names
            ):
                self.tracker.forget(item)

    def wait_pod(
        self,
        cl: Cluster,
        namespace: str,
        name: str,
        done: Callable[[Obj], bool],
        what: str,
        timeout: float,
        describe: Callable[[Obj], str] = pod_summary,
    ) -> Obj:
        def probe() -> tuple[Obj | None, str]:
            pod = cl.get_pod(namespace, name)
            phase = pod.get("status", {}).get("phase")
            if done(pod):
                return pod, describe(pod)
            if phase in ("Failed", "Succeeded"):
                raise CheckFailed(
                    what,
                    f"pod {name} ended: {describe(pod)}",
                    "container exited; check the image and its command",
                )
            return None, describe(pod)

        return self.wait(probe, what, timeout)

    def wait_running(
        self, cl: Cluster, namespace: str, name: str, timeout: float | None = None
    ) -> Obj:
        return self.wait_pod(
            cl,
            namespace,
            name,
            lambda p: p.get("status", {}).get("phase") == "Running",
            f"pod {name} Running",
            timeout or self.timeouts.pod_seconds,
        )

    def tools_pod(self, t: Tenant) -> Obj:
        """One busybox pod per tenant for the tunnel checks; a failure is cached too."""
        cached = self._tools.get(t.name)
        if isinstance(cached, CheckFailed):
            raise cached
        if cached is not None:
            return cached
        cl = self.tenant(t)
        ns = self.namespace(t)
        name = self.pod_name("tools")
        body = tools_pod(
            name, self.spec.tools_image, self.token(t), run_labels(self.run_id, "konnectivity")
        )
        try:
            self.create_pod(cl, ns, body)
            pod = self.wait_running(cl, ns, name)
        except WaitTimeout as exc:
            err = CheckFailed(
                f"tools pod {name} Running within {exc.timeout:g}s",
                exc.last,
                "workers NotReady, CNI missing, or image pull blocked",
            )
            self._tools[t.name] = err
            raise err from None
        except ClusterError as exc:
            err = CheckFailed(f"tools pod {name} created", str(exc), likely_cause(exc))
            self._tools[t.name] = err
            raise err from None
        self._tools[t.name] = pod
        return pod

    def token(self, t: Tenant) -> str:
        return f"labcheck-{self.run_id}-{t.name}"

    def record_placement(self, t: Tenant, pod: Obj) -> None:
        ann = pod.get("metadata", {}).get("annotations") or {}
        self.placements.setdefault(t.name, []).append(
            (
                pod["metadata"]["name"],
                ann.get("hami.io/vgpu-node", ""),
                pod.get("spec", {}).get("nodeName") or "",
            )
        )

    def keep_peak(self, m: TenantMap) -> None:
        """Keep `m` if it is the tenant's fullest card map so far (the later one on a tie)."""
        held = self.peak_maps.get(m.tenant)
        if held is None or m.segment_count >= held.segment_count:
            self.peak_maps[m.tenant] = m
