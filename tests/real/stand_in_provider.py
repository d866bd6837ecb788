"""A provider plugin that stands in for docker, command and kubernetes in a preview.

The real providers cannot be installed here (not served by any registry this machine reaches),
and a preview stops at the first resource whose provider is missing, before the analyzers see
it. This one does what a preview needs of a provider and nothing else: it accepts every
configuration and every resource's inputs unchanged, secrets kept, and declines preview
creates, so the engine plans each create with its inputs as outputs. Built on the Python SDK's
own provider server (pulumi.provider.experimental), run from the policy pack's virtualenv.
"""

from __future__ import annotations

import sys

from pulumi.provider.experimental.provider import ConfigureRequest, ConfigureResponse, Provider
from pulumi.provider.experimental.server import main


class StandIn(Provider):
    async def configure(self, request: ConfigureRequest) -> ConfigureResponse:
        # supports_preview=False: a preview never calls create (the default would).
        return ConfigureResponse(accept_secrets=True, supports_preview=False)


if __name__ == "__main__":
    main(sys.argv[1:], "0.0.1", StandIn())
