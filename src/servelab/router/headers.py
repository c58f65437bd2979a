"""Which headers cross the router: the client's on to the backend, the backend's back."""

from __future__ import annotations

# Hop-by-hop headers (RFC 9110 7.6.1) and those the router sets itself.
_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "host", "content-length", "expect",
})
_NOT_RELAYED = _HOP | {"date", "server"}


def upstream_headers(headers: dict[str, str], strip_auth: bool) -> dict[str, str]:
    """The client's headers (lower-case names) as sent on to the backend: no hop-by-hop
    ones, no `Authorization` when the router checked its own key, and no compression
    asked (the relay passes bytes through, it does not decode them)."""
    out = {k: v for k, v in headers.items() if k not in _HOP}
    if strip_auth:
        out.pop("authorization", None)
    if "accept-encoding" not in out:
        out["accept-encoding"] = "identity"
    return out


def relayed_headers(lines: list[bytes]) -> tuple[list[tuple[str, str]], str]:
    """The headers of an upstream answer passed on to the client, and its content type
    (without parameters)."""
    headers: list[tuple[str, str]] = []
    content_type = "application/octet-stream"
    for line in lines:
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip(), value.strip()
        low = name.lower()
        if low == "content-type":
            content_type = value.split(";", 1)[0].strip() or content_type
        if low not in _NOT_RELAYED:
            headers.append((name, value))
    return headers, content_type
