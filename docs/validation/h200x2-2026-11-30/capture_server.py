"""Records every POST /v1/completions body (one JSON line each) and streams max_tokens tokens back.

    python capture_server.py PORT OUT.jsonl

Used by bodycheck.sh: what `vllm bench serve` and `servelab bench` put in a request."""
import json, sys
from aiohttp import web
out = open(sys.argv[2], "w")
async def comp(req):
    body = await req.json()
    out.write(json.dumps(body, sort_keys=True) + "\n"); out.flush()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(req)
    n = body.get("max_tokens", 16)
    for i in range(n):
        await resp.write(b'data: {"id":"x","object":"text_completion","choices":[{"index":0,"text":" a","finish_reason":null}]}\n\n')
    await resp.write(b'data: {"id":"x","object":"text_completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (n, n+1))
    await resp.write(b"data: [DONE]\n\n")
    return resp
async def models(req):
    return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})
app = web.Application(); app.router.add_post("/v1/completions", comp); app.router.add_get("/v1/models", models)
app.router.add_get("/health", lambda r: web.Response())
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
