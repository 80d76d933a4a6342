"""Real headless Chromium (Debian ``chromium``) driven over the DevTools protocol with aiohttp's WebSocket client: load a
page, wait for what it draws, read the DOM and canvas pixels, take screenshots, and collect every console error,
uncaught exception and failed load the page produced."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Per canvas of the view: how many pixels differ from its most common colour (its background).
CANVAS_INK_JS = """[...document.querySelectorAll('#view canvas')].map(c => {
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, seen = new Map();
  for (let i = 0; i < d.length; i += 4) { const k = d[i] << 24 | d[i+1] << 16 | d[i+2] << 8 | d[i+3]; seen.set(k, (seen.get(k) || 0) + 1); }
  return {id: c.id || c.closest('[id]').id, ink: c.width * c.height - Math.max(0, ...seen.values()), colours: seen.size};
})"""


class Browser:
    def __init__(self, profile: Path) -> None:
        self.profile = profile
        self.errors: list[str] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def __aenter__(self) -> Browser:
        assert CHROMIUM, "chromium is not installed"
        self.profile.mkdir(parents=True, exist_ok=True)
        port_file = self.profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-dev-shm-usage", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", "--window-size=1400,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(300):
            if port_file.exists() and port_file.read_text().count("\n") >= 1:
                break
            await asyncio.sleep(0.1)
        else:
            await self._stop()
            raise AssertionError("chromium did not open its DevTools port within 30 s")
        port = port_file.read_text().split()[0]
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as resp:
            target = next(t for t in await resp.json() if t["type"] == "page")
        self.ws = await self.session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        for domain in ("Page", "Runtime", "Log"):
            await self.send(f"{domain}.enable")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._reader.cancel()
        await self.ws.close()
        await self.session.close()
        await self._stop()

    async def _stop(self) -> None:
        self.proc.terminate()
        try:
            await asyncio.to_thread(self.proc.wait, 10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data:
                waiting = self._waiting.pop(data["id"], None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(data)
                continue
            method, p = data.get("method"), data.get("params", {})
            if method == "Runtime.exceptionThrown":
                self.errors.append(json.dumps(p["exceptionDetails"])[:500])
            elif method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                self.errors.append(
                    " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", []))
                )
            elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
                self.errors.append(f"{p['entry'].get('url', '')}: {p['entry']['text']}")
            await self._events.put(data)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self._waiting[msg_id] = asyncio.get_running_loop().create_future()
        await self.ws.send_str(json.dumps({"id": msg_id, "method": method, "params": params}))
        reply = await asyncio.wait_for(self._waiting[msg_id], 30)
        assert "error" not in reply, reply
        return reply["result"]

    async def goto(self, url: str, timeout: float = 30) -> None:
        """Navigate and wait for the load event (a page whose load never ends fails here). Always a fresh load: a
        visit number in the query keeps a change of ``#view`` alone from being an in-page navigation."""
        while not self._events.empty():
            self._events.get_nowait()
        path, _, fragment = url.partition("#")
        path += ("&" if "?" in path else "?") + f"visit={next(self._ids)}"
        await self.send("Page.navigate", url=f"{path}#{fragment}" if fragment else path)
        async with asyncio.timeout(timeout):
            while (await self._events.get()).get("method") != "Page.loadEventFired":
                pass

    async def js(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    async def wait_js(self, expression: str, timeout: float = 20) -> Any:
        """Poll ``expression`` in the page until it is truthy (the page has no event to wait on)."""
        async with asyncio.timeout(timeout):
            while True:
                if value := await self.js(expression):
                    return value
                await asyncio.sleep(0.1)

    async def view(self, url: str, name: str, timeout: float = 30) -> str:
        """Load ``url`` and wait until the page has drawn view ``name``; the view's HTML."""
        await self.goto(url, timeout)
        await self.wait_js(f"document.getElementById('view').dataset.view === {json.dumps(name)}", timeout)
        html: str = await self.js("document.getElementById('view').outerHTML")
        return html

    async def canvas_ink(self) -> list[dict[str, Any]]:
        ink: list[dict[str, Any]] = await self.js(CANVAS_INK_JS)
        return ink

    async def screenshot(self, path: Path) -> None:
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=False)
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))
