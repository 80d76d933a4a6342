"""``ranksight report JOB [-o FILE.html] [--db FILE]``: a job's report as one self-contained HTML file.

From the running aggregator's HTTP face (``/reports/<job>.html``, rendered from its history now), or offline from a
DuckDB history file (``--db``: read-only, the same SQL sandbox). Writes ``FILE`` (default ``report-<job>.html``) and
prints its path. Exit 0 written, 1 when no history names the job or the aggregator cannot answer, 2 on usage errors.
Nothing heavy is imported before the command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ranksight.core.cliutil import EXIT_FAILED, EXIT_OK, add_config_flags, settings_from_args
from ranksight.core.config import CommonSettings

if TYPE_CHECKING:
    from ranksight.aggregator.settings import AggregatorView

HTTP_TIMEOUT_S = 60.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("report", help="a job's report: one self-contained HTML file (step time, compute share, "
                                      "bandwidth, findings, GPU-hours lost, hardware, links, coverage)")  # fmt: skip
    add_config_flags(p)
    p.add_argument("job", metavar="JOB", help="the job id, as `ranksight jobs` shows it")
    p.add_argument("--cluster", help="the job's cluster, where several share one history")
    p.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="where to write it (default report-<job>.html)"
    )
    p.add_argument("--db", type=Path, metavar="FILE",
                   help="offline from this DuckDB history file (read-only; not while an aggregator holds it)")  # fmt: skip
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The aggregator's view composes the HTTP server's section, which serves reports: imported for the type checker
    # only (a cycle otherwise).
    settings = cast("AggregatorView", settings_from_args(args, CommonSettings))
    text = _offline(settings, args) if args.db is not None else _from_aggregator(settings, args)
    if text is None:
        return EXIT_FAILED
    from ranksight.aggregator.report import report_file

    path: Path = args.output or report_file(Path.cwd(), f"report-{args.job}")
    try:
        path.write_text(text)
    except OSError as exc:
        print(f"ranksight: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    print(path)
    return EXIT_OK


def _offline(settings: AggregatorView, args: argparse.Namespace) -> str | None:
    from ranksight.aggregator.api.offline import OfflineHistory
    from ranksight.aggregator.api.sql import SqlError
    from ranksight.aggregator.report import JobNotFound, job_report

    async def read() -> str | None:
        history = OfflineHistory(settings, args.db)
        try:
            await history.open()
        except Exception as exc:
            print(
                f"ranksight: cannot read the history file: {str(exc).strip().splitlines()[0]}",
                file=sys.stderr,
            )
            return None
        try:
            return await job_report(history.sandbox, settings.aggregator.report, args.job, args.cluster,
                                    settings.aggregator.query.sql_time_limit_s)  # fmt: skip
        except (JobNotFound, SqlError) as exc:
            print(f"ranksight: {exc}", file=sys.stderr)
            return None
        finally:
            await history.close()

    return asyncio.run(read())


def _from_aggregator(settings: AggregatorView, args: argparse.Namespace) -> str | None:
    http = settings.aggregator.http
    host = "127.0.0.1" if http.host in ("0.0.0.0", "::", "") else http.host
    query = urllib.parse.urlencode({"cluster": args.cluster} if args.cluster else {})
    url = f"http://{host}:{http.port}/reports/{urllib.parse.quote(args.job, safe='')}.html" + (
        f"?{query}" if query else ""
    )
    request = urllib.request.Request(url)
    if http.token is not None:
        request.add_header("Authorization", f"Bearer {http.token.get_secret_value()}")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return str(response.read().decode())
    except urllib.error.HTTPError as exc:
        reason = exc.read().decode(errors="replace").strip() or exc.reason
        print(f"ranksight: {reason}", file=sys.stderr)
    except (urllib.error.URLError, OSError) as exc:
        print(f"ranksight: no aggregator answers at {url} ({getattr(exc, 'reason', exc)}); offline: --db FILE",
              file=sys.stderr)  # fmt: skip
    return None
