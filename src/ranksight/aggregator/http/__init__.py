"""The aggregator's HTTP face (design §5): JSON API mirroring the NATS endpoints, OpenAPI, /metrics, /events, web page."""
