// The page's live updates: reads the /events stream (URL posted by the page) and tells the page what arrives.
// It runs in a worker because headless Chromium's virtual-time budget (--virtual-time-budget, what screenshot tools
// use) stops while the page itself has a load pending, and a stream never finishes loading: the screenshot would
// never be taken. A worker's stream does not hold the page's clock.
"use strict";
onmessage = message => {
  const events = new EventSource(message.data);
  events.onopen = () => postMessage("open");
  events.onerror = () => postMessage("error");
  ["alert", "node"].forEach(kind => events.addEventListener(kind, () => postMessage(kind)));
};
