"""The HTTP room of the core: how specdec talks to a server, whichever engine it is.

- ``urls``: a server URL split into what a request uses and a display form
  without secrets (``parse_endpoint``, ``redact_url``, ``redact_text``), and how
  every request is sent (``ClientSettings``, ``request_headers``);
- ``metrics``: the ``/metrics`` page and vLLM's ``/reset_prefix_cache``, read
  and posted with those settings.

The engines layer does not import it (an adapter parses text it is given);
the replay, the experiments above it and the capture sidecar do. Only this
room and the replay's own client (``replay/http``) import aiohttp.
"""
