"""``ranksight alerts --follow``: print each alert published on the alert subjects as it fires or resolves."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from ranksight.api.settings import ApiView
from ranksight.core.cliutil import interrupted_exit, print_line, settings_from_args

if TYPE_CHECKING:
    import asyncio

    from ranksight.schemas.alerts import Alert


def add_follow_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--follow",
        action="store_true",
        help="subscribe to the alert subjects until interrupted (--json: one alert object per line)",
    )


def follow_if_asked(args: argparse.Namespace) -> int | None:
    """With ``--follow``: follow the alerts until interrupted and return the exit code; otherwise None."""
    if not args.follow:
        return None
    # here, not above: parsing a query command loads no NATS client
    from ranksight.core.aio import run_until_signalled

    settings = settings_from_args(args, ApiView)
    signum = run_until_signalled(
        lambda stop: _follow(settings, args.cluster, args.json, stop), settings.shutdown_timeout_s
    )
    return interrupted_exit(signum)


async def _follow(settings: ApiView, cluster: str | None, as_json: bool, stop: asyncio.Event) -> None:
    """Print every alert published on the alert subjects until ``stop``; one JSON object per line with ``as_json``."""
    from ranksight.core.natsconn import connect, disconnect
    from ranksight.schemas.alerts import Alert
    from ranksight.schemas.subjects import Subjects

    subject = Subjects(settings.subject_prefix).alerts_filter(cluster)
    nc = await connect(settings.nats, name="ranksight-alerts-follow")
    try:
        sub = await nc.subscribe(subject)
        await nc.flush()
        print(f"ranksight: following alerts on {subject}", file=sys.stderr, flush=True)
        while not stop.is_set():
            try:
                msg = await sub.next_msg(timeout=0.5)
            except TimeoutError:
                continue
            try:
                alert = Alert.model_validate_json(msg.data)
            except ValueError as exc:
                print_line(f"ranksight: skipping a malformed alert on {msg.subject}: {exc}", sys.stderr)
                continue
            if as_json:
                print(json.dumps(alert.model_dump()), flush=True)
            else:
                print_line(_alert_line(alert))
                sys.stdout.flush()
    finally:
        await disconnect(nc, settings.nats.connect_timeout_s)


def _alert_line(alert: Alert) -> str:
    where = " ".join(
        f"{k}={v}" for k in ("cluster", "node", "job", "comm", "rank") if (v := getattr(alert, k))
    )
    return f"{alert.updated_at}  {alert.state.upper():8}  {alert.severity:8}  {alert.rule}  {where}  {alert.summary}"
