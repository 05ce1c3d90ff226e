"""The recording proxy between clients and an OpenAI-compatible server:
``service`` (the aiohttp app and its routes), ``http`` (hop-by-hop headers,
``Expect``), ``guard`` (timeouts, one log line per bad request), ``record``
(a request and reply -> a traffic row), ``rules`` (category rules), ``redact``
(credentials and personal data kept off disk), ``writer`` (rows -> Parquet,
losses counted) and ``export`` (recordings -> a traffic file)."""
