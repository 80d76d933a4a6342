"""Push alerts and silences to Prometheus Alertmanager (``POST /api/v2/alerts``, ``/api/v2/silences``).

Alertmanager does the routing, grouping, inhibition and notification; ranksight feeds it the way Prometheus does:
every firing alert is re-sent each ``resend_s`` with ``endsAt`` four periods ahead (so an aggregator that dies lets its
alerts resolve there by themselves), and a resolution is sent with its ``endsAt``. Each Alertmanager URL has its own
queue: while one is down, its resolutions and silence changes wait (at most ``max_pending``, each tried at most
``max_attempts`` times with a growing pause); the firing set needs no queue, it is read from the engine at each push.

Labels: ``alertname`` (= rule), ``rule``, ``severity``, ``cluster``, ``node``, ``job``, ``entity`` (those with a value)
and ``fingerprint`` (keeps alerts that share the other labels apart). Annotations: ``summary``, ``evidence`` (JSON),
``url`` (the web page, filtered to the node / job). Our silences become Alertmanager silences, tagged in the comment.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import time
import urllib.parse
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ranksight.aggregator.component_settings import AlertmanagerSettings
from ranksight.aggregator.timefmt import NS, iso, ns_of
from ranksight.core.cliutil import printable
from ranksight.schemas.alerts import Alert, Silence

log = logging.getLogger(__name__)
TAG = "[ranksight:{}]"  # in an Alertmanager silence's comment: which ranksight silence it mirrors
MAX_BACKOFF_S = 60.0


def clean(value: str) -> str:
    """A label or annotation value as Alertmanager passes it on: to HTML mail, chat and pager templates. Control
    characters are escaped (:func:`~ranksight.core.cliutil.printable`) and so is HTML, since not every receiver's
    template escapes it. Silence matchers on a label get the same treatment, so they still match."""
    return html.escape(printable(value), quote=False)  # quotes stay: evidence stays JSON


def alert_body(alert: Alert, valid_until_ns: int, page_url: str | None) -> dict[str, Any]:
    """One alert in Alertmanager's ``postableAlert`` shape, every value :func:`clean`."""
    labels = {"alertname": alert.rule, **alert.labels(), "fingerprint": alert.fingerprint}
    labels = {name: clean(value) for name, value in labels.items()}
    annotations = {
        "summary": clean(alert.summary),
        "evidence": clean(json.dumps(alert.evidence, default=str, sort_keys=True)),
    }
    body: dict[str, Any] = {"labels": labels, "annotations": annotations, "startsAt": alert.started_at,
                            "endsAt": alert.resolved_at if alert.state == "resolved" else iso(valid_until_ns)}  # fmt: skip
    if page_url:
        search = alert.node or alert.job or alert.rule
        body["generatorURL"] = annotations["url"] = (
            f"{page_url.rstrip('/')}/?search={urllib.parse.quote(search)}"
        )
    return body


def silence_body(silence: Silence) -> dict[str, Any]:
    matchers = [{"name": "alertname" if m.name == "rule" else m.name,
                 "value": m.value if m.is_regex else clean(m.value), "isRegex": m.is_regex,
                 "isEqual": m.is_equal} for m in silence.matchers]  # fmt: skip
    comment = f"{clean(silence.comment)} {TAG.format(silence.id)}".strip()
    return {"matchers": matchers, "startsAt": silence.starts_at, "endsAt": silence.ends_at,
            "createdBy": silence.created_by or "ranksight", "comment": comment}  # fmt: skip


@dataclass
class Pending:
    item: Alert | Silence
    attempts: int = 0


@dataclass
class Target:
    """One Alertmanager and what it still has to be told."""

    url: str
    queue: deque[Pending]
    silence_ids: dict[str, str] = field(
        default_factory=dict
    )  # ranksight silence id -> Alertmanager silence id
    synced: bool = False  # silences of earlier runs looked up
    failures: int = 0
    next_try: float = 0.0
    stats: Counter[str] = field(default_factory=Counter)


class AlertmanagerPush:
    """Owned by the aggregator: ``transitions()`` after each tick, ``silence_changed()`` from the API, ``run()``."""

    def __init__(self, settings: AlertmanagerSettings, page_url: Callable[[], str | None]) -> None:
        self.settings = settings
        self.page_url = page_url
        self.targets = [Target(url.rstrip("/"), deque()) for url in settings.urls]
        self._wake = asyncio.Event()

    def _enqueue(self, item: Alert | Silence) -> None:
        for target in self.targets:
            if len(target.queue) >= self.settings.max_pending:
                target.queue.popleft()
                target.stats["dropped"] += 1
                log.warning(
                    "alertmanager %s: queue full (max_pending); dropped the oldest change", target.url
                )
            target.queue.append(Pending(item))
        self._wake.set()

    def transitions(self, alerts: Iterable[Alert]) -> None:
        """Resolutions are queued; a new firing alert just wakes the pusher (the firing set is read at each push)."""
        for alert in alerts:
            if alert.state == "resolved":
                self._enqueue(alert)
            else:
                self._wake.set()

    def silence_changed(self, silence: Silence) -> None:
        self._enqueue(silence)

    async def run(
        self, firing: Callable[[], Iterable[Alert]], silences: Callable[[], Iterable[Silence]]
    ) -> None:
        if not self.targets:  # nothing to push to; an aggregator task ends only when cancelled
            await asyncio.Event().wait()
        for silence in silences():
            self.silence_changed(silence)
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            last_full = 0.0
            while True:
                now = time.monotonic()
                full = now - last_full >= self.settings.resend_s
                if full:
                    last_full = now
                for target in self.targets:
                    if now >= target.next_try and (full or target.queue or self._wake.is_set()):
                        await self._push(session, target, list(firing()))
                self._wake.clear()
                waits = [t.next_try - time.monotonic() for t in self.targets if t.queue and t.failures]
                delay = min([self.settings.resend_s - (time.monotonic() - last_full), *waits])
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=max(delay, 0.05))
                except TimeoutError:
                    pass

    async def _push(self, session: aiohttp.ClientSession, target: Target, firing: list[Alert]) -> None:
        valid_until = time.time_ns() + int(4 * self.settings.resend_s * NS)
        page = self.settings.page_url or self.page_url()
        try:
            if not target.synced:
                await self._sync_silences(session, target)
            resolved = [p for p in target.queue if isinstance(p.item, Alert)]
            bodies = [alert_body(a, valid_until, page) for a in firing]
            bodies += [alert_body(p.item, valid_until, page) for p in resolved]  # type: ignore[arg-type]
            if bodies:
                await self._request(session, "POST", f"{target.url}/api/v2/alerts", bodies)
            target.stats["alerts_sent"] += len(bodies)
            for p in resolved:
                target.queue.remove(p)
            for p in [p for p in target.queue if isinstance(p.item, Silence)]:
                await self._push_silence(session, target, p.item)  # type: ignore[arg-type]
                target.queue.remove(p)
            target.failures = 0
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            target.failures += 1
            target.stats["failures"] += 1
            target.next_try = time.monotonic() + min(
                2.0**target.failures, MAX_BACKOFF_S, self.settings.resend_s
            )
            if target.failures == 1:
                log.warning(
                    "alertmanager %s unreachable (%s); keeping its changes and retrying", target.url, exc
                )
            self._give_up(target)

    def _give_up(self, target: Target) -> None:
        for p in list(target.queue):
            p.attempts += 1
            if p.attempts >= self.settings.max_attempts:
                target.queue.remove(p)
                target.stats["dropped"] += 1
                log.error(
                    "alertmanager %s: giving up on %s after %d attempts",
                    target.url,
                    _name(p.item),
                    p.attempts,
                )

    async def _sync_silences(self, session: aiohttp.ClientSession, target: Target) -> None:
        """Find the silences an earlier run created, so that re-sending them updates instead of duplicating."""
        existing = await self._request(session, "GET", f"{target.url}/api/v2/silences")
        for s in existing or []:
            comment, state = s.get("comment", ""), s.get("status", {}).get("state")
            if "[ranksight:" in comment and state != "expired":
                target.silence_ids[comment.rsplit("[ranksight:", 1)[1].rstrip("]")] = s["id"]
        target.synced = True

    async def _push_silence(self, session: aiohttp.ClientSession, target: Target, silence: Silence) -> None:
        am_id = target.silence_ids.get(silence.id)
        if time.time_ns() >= ns_of(silence.ends_at):  # expired: delete it there, if it ever got there
            if am_id is not None:
                await self._request(session, "DELETE", f"{target.url}/api/v2/silence/{am_id}")
                del target.silence_ids[silence.id]
            return
        body = silence_body(silence) | ({"id": am_id} if am_id else {})
        answer = await self._request(session, "POST", f"{target.url}/api/v2/silences", body)
        target.silence_ids[silence.id] = answer["silenceID"]
        target.stats["silences_sent"] += 1

    async def _request(self, session: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> Any:
        async with session.request(method, url, json=body) as response:
            text = await response.text()
            if response.status >= 300:
                raise ValueError(f"{method} {url}: HTTP {response.status} {text[:200]}")
            return json.loads(text) if text.strip() else None


def _name(item: Alert | Silence) -> str:
    return (
        f"resolution of {item.rule} {item.fingerprint}" if isinstance(item, Alert) else f"silence {item.id}"
    )
