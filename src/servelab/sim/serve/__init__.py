"""`servelab sim serve`: the simulated engine behind an OpenAI-compatible HTTP server on a
real-time clock. `server` (the routes), `driver` (the engine on the server's clock),
`openai` (request parsing, chunk and error shapes), `text` (prompt tokens, output text),
`reply` (a response from its token stream), `log` (vLLM's startup and stats lines),
`metrics` (vLLM's Prometheus names), `app` (options, signals, run)."""
