"""`tandem serve`: the loaded pair as a local server that editors and coding agents speak to —
OpenAI's chat completions and Responses API, Anthropic's Messages API and llama-server's own
routes — with MTP and lookup drafting on every one, offline.

Rooms: http (middlewares, uvicorn), admission (turns, the queue, totals), choice (one
generation read as Deltas), reply (the reply assembler), request (the OpenAI request and its
checks, which every API's request is translated into), one module per API and one of its reply
shapes (openai_shapes, anthropic_shapes, responses_shapes: typed models), app (all of it).
"""

from .admission import ServerState
from .app import BackgroundServer, create_app, run
from .http import HEADER_TIMEOUT_S, check_host

__all__ = ["BackgroundServer", "HEADER_TIMEOUT_S", "ServerState", "check_host", "create_app", "run"]
