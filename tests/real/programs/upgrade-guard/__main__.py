"""The program's UpgradeGuard alone, under the real CLI: config `version` is tenant-a's
version, and the stack records it in its `tenants` output as the lab's program does. The
repository's packages come from PYTHONPATH (the test sets it)."""

import pulumi

from components.upgrade_guard import (
    TENANTS_OUTPUT,
    VERSION_KEY,
    TenantVersion,
    UpgradeGuard,
    UpgradeGuardArgs,
)

version = pulumi.Config().require("version")
guard = UpgradeGuard(
    "upgrades",
    UpgradeGuardArgs(
        tenants=[TenantVersion("tenant-a", version, ("tenant-a-worker-1",), replaced=True)],
        stack=f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}",
    ),
)
pulumi.export(TENANTS_OUTPUT, {"tenant-a": {VERSION_KEY: guard.version("tenant-a")}})
