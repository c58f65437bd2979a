"""The router: an OpenAI-compatible HTTP proxy in front of several backends (intake,
pool and health, relay with retries, metrics). Its routing decisions are
`servelab.routing`'s policies, which the simulator shares; `servelab route` (or
`python -m servelab.cli.route`) starts it."""
