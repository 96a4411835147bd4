"""Ray's own command line for `llamapy serve --replicas`:

    serve run llamapy.cli.replicas:app_builder args="-m MODEL -np 4 -t 1" replicas=2

args are `llamapy serve`'s flags, parsed here into the typed ServeSettings every replica
starts from; replicas, min_replicas, max_replicas and routing are Ray's own arguments."""
from __future__ import annotations

import shlex
from dataclasses import replace

from .main import build_parser
from .serve import replica_argv, serve_settings


def app_builder(args: dict):
    """For Ray's `serve run llamapy.cli.replicas:app_builder args="..." replicas=2 ...`."""
    from ..replicas.app import build_app, plan_from_settings

    argv = shlex.split(str(args.get("args", "")))
    s = serve_settings(build_parser().parse_args(["serve", *argv]))
    s.check()
    plan = plan_from_settings(s, replica_argv(argv))
    over = {k: int(args[k]) for k in ("replicas", "min_replicas", "max_replicas") if k in args}
    if "routing" in args:
        over["routing"] = str(args["routing"])
    return build_app(replace(plan, **over))
