"""External events: delivery (POST /v1/events, the buffered events' pass) and per-wait callbacks with
the integration secrets that sign them. See docs/definitions.md (wait_event) and docs/security.md."""

from .callbacks import TOKEN_RE, Callbacks, callback_hash
from .delivery import EVENT_ID_RE, EventDeliveries, check_event

__all__ = ["EVENT_ID_RE", "TOKEN_RE", "Callbacks", "EventDeliveries", "callback_hash", "check_event"]
