"""Entry point: `python -m gpu_agent [--once] [--api-url URL --token TOKEN]`."""

from __future__ import annotations

import argparse
import logging
import signal
import ssl
import sys
import threading

from .agent import EXIT_AUTH, EXIT_BUG, EXIT_CONFIG, EXIT_OK, LOG, reconcile_once, run
from .config import CONFIG_ENV, CONFIG_FILE_ENV, ConfigError, load_config
from .kube import ApiError, AuthError, HttpKubeApi

# The config never comes from an option: say in --help where it does come from.
CONFIG_HELP = f"""\
configuration (required, from the environment):
  {CONFIG_ENV}       the config as JSON text, or
  {CONFIG_FILE_ENV}  the path of a JSON file (what the lab's Deployment sets)
  e.g. {CONFIG_ENV}='{{"nodes": {{"w1": [{{"type": "NVIDIA L4", "devmem": 23034}}]}}}}'
  keys: nodes (node -> cards {{type, devmem MB, devcore %, count}}), splitCount, resyncSeconds,
  relistSeconds, requeueAfterRegisterSeconds, nodeLabels; see docs/gpu-agent.md
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="gpu_agent",
        description=__doc__,
        epilog=CONFIG_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--once", action="store_true", help="run one pass and exit")
    ap.add_argument("--api-url", help="debug: API server URL instead of in-cluster config")
    ap.add_argument("--token", help="debug: bearer token for --api-url")
    ap.add_argument("--insecure", action="store_true", help="debug: skip TLS verification")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stdout,
    )
    try:
        config = load_config()
    except ConfigError as exc:
        LOG.error("bad config: %s (python -m gpu_agent --help shows an example)", exc)
        return EXIT_CONFIG
    try:
        if args.api_url:
            ctx = ssl.create_default_context()
            if args.insecure:
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            api = HttpKubeApi(args.api_url, args.token, ssl_context=ctx)
        else:
            api = HttpKubeApi.in_cluster()
    except (AuthError, OSError) as exc:  # ssl.SSLError is an OSError
        LOG.error("cannot set up API access: %s", exc)
        return EXIT_AUTH

    if args.once:
        try:
            summary = reconcile_once(api, config)
        except AuthError as exc:
            LOG.error("fatal: %s", exc)
            return EXIT_AUTH
        except ApiError as exc:
            LOG.error("pass failed: %s", exc)
            return EXIT_BUG
        return EXIT_BUG if summary.errors else EXIT_OK

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # graceful stop on pod deletion
        signal.signal(sig, lambda *_: stop.set())
    return run(api, config, stop)


if __name__ == "__main__":
    sys.exit(main())
