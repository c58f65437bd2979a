"""The HTTP response of one generation request, written from its `RequestStream`.

`stream_reply` sends SSE chunks as the driver hands tokens over; `collect_reply` waits for
the last token and answers one JSON body. Both own no state beyond the response they
write: the request id, headers and output text come from the handler in
`servelab.sim.serve.server`, the chunk shapes from `servelab.sim.serve.openai`.
"""

from __future__ import annotations

from aiohttp import web

from servelab.sim.serve.driver import Ended, RequestStream
from servelab.sim.serve.openai import (
    SSE_DONE,
    ApiError,
    GenerationParams,
    ResponseHead,
    sse,
    usage,
)
from servelab.sim.serve.text import RequestText


async def stream_reply(request: web.Request, params: GenerationParams, head: ResponseHead,
                       stream: RequestStream, text: RequestText,
                       headers: dict[str, str]) -> web.StreamResponse:
    """Write `stream`'s tokens as SSE chunks until it finishes or ends, then `[DONE]`."""
    resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    prompt_len, done = len(stream.prompt_ids), 0
    cont = params.continuous_usage
    while True:
        item = await stream.queue.get()
        if isinstance(item, Ended):
            if item.aborted:
                use = usage(prompt_len, done) if cont else None
                await resp.write(sse(head.token_chunk("", "abort", use)))
            else:
                await resp.write(sse(ended_error(item).body()))
            break
        event = item.event
        if event.first and head.kind == "chat":
            await resp.write(sse(head.role_chunk(usage(prompt_len, 0) if cont else None)))
        done += event.num_tokens
        finish = (event.finish_reason or "length") if event.finished else None
        use = usage(prompt_len, done) if cont else None
        await resp.write(sse(head.token_chunk(text.next(event.num_tokens), finish, use)))
        if event.finished:
            break
    if params.include_usage:
        await resp.write(sse(head.usage_chunk(usage(prompt_len, done))))
    await resp.write(SSE_DONE)
    await resp.write_eof()
    return resp


async def collect_reply(head: ResponseHead, stream: RequestStream, text: RequestText,
                        headers: dict[str, str]) -> web.Response:
    """Wait for `stream`'s last token and answer the whole output as one JSON body."""
    parts: list[str] = []
    done = 0
    while True:
        item = await stream.queue.get()
        if isinstance(item, Ended):
            if not item.aborted:
                raise ended_error(item)
            finish = "abort"
            break
        done += item.event.num_tokens
        parts.append(text.next(item.event.num_tokens))
        if item.event.finished:
            finish = item.event.finish_reason or "length"
            break
    body = head.full("".join(parts), finish, usage(len(stream.prompt_ids), done))
    return web.json_response(body, headers=headers)


def ended_error(ended: Ended) -> ApiError:
    """The API error for a stream the engine ended without finishing (not an abort)."""
    if ended.status >= 500:
        return ApiError(ended.status, ended.message, "InternalServerError")
    return ApiError(ended.status, ended.message)
