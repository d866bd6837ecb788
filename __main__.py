"""kamaji-hami-lab: read the stack config, build the lab graph, export what a user needs."""

import gc
import sys

import pulumi

from components.lab import build_lab
from components.outputs import stack_outputs
from components.platform.kamaji_chart import ChartFetchFailed
from labconfig.model import ConfigError
from labconfig.parse import parse_config
from labconfig.stack import read_stack_config

# The language host's "the error is already shown" exit: the CLI then adds no "program exited
# with non-zero exit code" line (upstream fact `pulumi-python-run-error-no-traceback`).
EXIT_ERROR_SHOWN = 32

try:
    # Through pulumi.Config: the same under the CLI and an Automation API inline program.
    cfg = parse_config(read_stack_config(pulumi.Config()))
except ConfigError as error:
    # A user error, not a bug: one clear line, no traceback, nothing registered.
    pulumi.log.error(f"invalid stack config: {error}")
    sys.exit(EXIT_ERROR_SHOWN)

# The program builds thousands of long-lived objects (resources, outputs, futures) and then
# exits: full cyclic collections would only re-walk them, and cost a 50-tenant lab most of its
# evaluation time. Young-generation collections still run.
gc.set_threshold(10_000, 50, 1_000)
try:
    lab = build_lab(cfg, pulumi.get_stack())
except ChartFetchFailed as error:
    # The host lacks what the program needs (git, helm, the network): one `error:` line.
    pulumi.log.error(str(error))
    sys.exit(EXIT_ERROR_SHOWN)
for key, value in stack_outputs(cfg, lab).items():
    pulumi.export(key, value)
