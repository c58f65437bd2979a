"""Traffic: request specs, datasets, tokenizers, arrival schedules and inspection."""

from servelab.workload.request import ChatMessage, RequestSpec

__all__ = ["ChatMessage", "RequestSpec"]
