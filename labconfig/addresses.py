"""Address plan of the lab network: container range, MetalLB pool, tenant API addresses, and
the dashboard's address.

Everything is derived from the configured subnet with ``ipaddress``, so the pool is never
guessed from ``docker network inspect`` (the original lab's IPv6 trap).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

from labconfig.model import ConfigError, LabConfig

DEFAULT_POOL_SIZE = 50
# Addresses the management node, the gateway and a few spares take in the container range.
CONTAINER_RESERVE = 4
# kubeadm's convention, kept by builders' dns_service_ip: the tenth service address.
DNS_SERVICE_INDEX = 10


@dataclass(frozen=True)
class NetworkPlan:
    subnet: IPv4Network
    gateway: IPv4Address
    container_range: IPv4Network
    pool_start: IPv4Address
    pool_end: IPv4Address
    tenant_addresses: dict[str, IPv4Address]
    # Grafana's LoadBalancer address: the pool's last, planned like the tenants' so that a
    # Service created first never takes a tenant's address. None without a dashboard.
    dashboard_address: IPv4Address | None = None

    @property
    def pool_range(self) -> str:
        """MetalLB wants a range, never a CIDR (a CIDR would hand out its .0)."""
        return f"{self.pool_start}-{self.pool_end}"

    @property
    def pool_size(self) -> int:
        return int(self.pool_end) - int(self.pool_start) + 1


def _network(key: str, text: str) -> IPv4Network:
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as error:
        raise ConfigError(key, f"{text!r} is not a network in CIDR form: {error}") from None
    if not isinstance(net, IPv4Network):
        raise ConfigError(key, f"{text!r} is IPv6; the lab network is IPv4 only")
    return net


def _address(key: str, text: str) -> IPv4Address:
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        raise ConfigError(key, f"{text!r} is not an IP address") from None
    if not isinstance(addr, IPv4Address):
        raise ConfigError(key, f"{text!r} is IPv6; the lab network is IPv4 only")
    return addr


def _default_pool(subnet: IPv4Network, container_range: IPv4Network) -> tuple[int, int]:
    """The last DEFAULT_POOL_SIZE addresses below the broadcast, above the container range."""
    end = int(subnet.broadcast_address) - 1
    lowest = int(container_range.broadcast_address) + 1
    return max(lowest, end - DEFAULT_POOL_SIZE + 1), end


def _pool(cfg: LabConfig, subnet: IPv4Network, containers: IPv4Network) -> tuple[int, int]:
    if not cfg.pool_range:
        return _default_pool(subnet, containers)
    first, sep, last = cfg.pool_range.partition("-")
    if not sep:
        raise ConfigError("poolRange", f"{cfg.pool_range!r} must be a range like a.b.c.d-a.b.c.e")
    start, end = _address("poolRange", first.strip()), _address("poolRange", last.strip())
    if start > end:
        raise ConfigError("poolRange", f"{cfg.pool_range!r} starts after it ends")
    return int(start), int(end)


def plan_network(cfg: LabConfig) -> NetworkPlan:
    subnet = _network("subnet", cfg.subnet)
    if subnet.num_addresses < 4:
        # Also keeps `network_address + 1` below from overflowing (255.255.255.255/32).
        raise ConfigError("subnet", f"{subnet} is too small: use a larger subnet (a /24 or more)")
    gateway = _address("gateway", cfg.gateway) if cfg.gateway else subnet.network_address + 1
    if gateway not in subnet or gateway in (subnet.network_address, subnet.broadcast_address):
        raise ConfigError("gateway", f"{gateway} is not a host address of subnet {subnet}")

    if cfg.container_range:
        containers = _network("containerRange", cfg.container_range)
    else:
        containers = next(subnet.subnets(prefixlen_diff=1)) if subnet.prefixlen < 32 else subnet
    if not containers.subnet_of(subnet):
        raise ConfigError("containerRange", f"{containers} is not inside subnet {subnet}")
    workers = sum(t.container_workers for t in cfg.tenants)
    if containers.num_addresses < workers + CONTAINER_RESERVE:
        raise ConfigError(
            "containerRange" if cfg.container_range else "subnet",
            f"{containers} holds {containers.num_addresses} addresses; the lab needs "
            f"{workers + CONTAINER_RESERVE} for {workers} workers, the management node and the "
            "gateway: use a larger subnet (a /24 or more)",
        )

    start, end = _pool(cfg, subnet, containers)
    pool_key = "poolRange" if cfg.pool_range else "subnet"
    if not (int(subnet.network_address) < start and end < int(subnet.broadcast_address)):
        raise ConfigError(pool_key, f"pool must lie inside {subnet}, off its first/last address")
    if start <= int(containers.broadcast_address) and end >= int(containers.network_address):
        raise ConfigError(pool_key, f"pool overlaps the container range {containers}")
    if start <= int(gateway) <= end:
        raise ConfigError(pool_key, f"pool includes the gateway {gateway}")
    dashboard = cfg.monitoring.enabled and cfg.monitoring.grafana
    needed = len(cfg.tenants) + dashboard
    if end - start + 1 < needed:
        raise ConfigError(
            pool_key,
            f"pool {IPv4Address(start)}-{IPv4Address(end)} has {end - start + 1} addresses "
            f"for {len(cfg.tenants)} tenants{' and the dashboard' if dashboard else ''}: "
            "use a larger subnet or poolRange",
        )

    _check_tenant_cidrs(cfg, subnet)
    dashboard_address = IPv4Address(end) if dashboard else None
    return NetworkPlan(
        subnet=subnet,
        gateway=gateway,
        container_range=containers,
        pool_start=IPv4Address(start),
        pool_end=IPv4Address(end),
        tenant_addresses=_tenant_addresses(cfg, start, end, dashboard_address),
        dashboard_address=dashboard_address,
    )


def _check_tenant_cidrs(cfg: LabConfig, subnet: IPv4Network) -> None:
    for index, tenant in enumerate(cfg.tenants):
        pods = _network(f"tenants[{index}].podCidr", tenant.pod_cidr)
        services = _network(f"tenants[{index}].serviceCidr", tenant.service_cidr)
        for key, net in (("podCidr", pods), ("serviceCidr", services)):
            if net.overlaps(subnet):
                raise ConfigError(
                    f"tenants[{index}].{key}", f"{net} overlaps the lab subnet {subnet}"
                )
        if services.num_addresses <= DNS_SERVICE_INDEX:
            # The tenant's control plane gives CoreDNS the address at this index of the range.
            raise ConfigError(
                f"tenants[{index}].serviceCidr",
                f"{services} is too small: CoreDNS takes address #{DNS_SERVICE_INDEX} (use a /28)",
            )
        if pods.overlaps(services):
            raise ConfigError(
                f"tenants[{index}].serviceCidr", f"{services} overlaps podCidr {pods}"
            )


def _tenant_addresses(
    cfg: LabConfig, start: int, end: int, dashboard: IPv4Address | None
) -> dict[str, IPv4Address]:
    """Pinned addresses first, then each other tenant takes the lowest free pool address."""
    taken: dict[IPv4Address, str] = {dashboard: "the dashboard"} if dashboard else {}
    for index, tenant in enumerate(cfg.tenants):
        if tenant.address is None:
            continue
        key = f"tenants[{index}].address"
        addr = _address(key, tenant.address)
        if not start <= int(addr) <= end:
            raise ConfigError(
                key,
                f"{addr} is outside the pool {IPv4Address(start)}-{IPv4Address(end)}",
            )
        if addr == dashboard:
            raise ConfigError(key, f"{addr} is the dashboard's (the pool's last address)")
        if addr in taken:
            raise ConfigError(key, f"{addr} is already pinned by tenant {taken[addr]!r}")
        taken[addr] = tenant.name
    free = (IPv4Address(i) for i in range(start, end + 1) if IPv4Address(i) not in taken)
    addresses: dict[str, IPv4Address] = {}
    for tenant in cfg.tenants:
        addresses[tenant.name] = IPv4Address(tenant.address) if tenant.address else next(free)
    return addresses
