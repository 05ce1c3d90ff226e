"""HTTP: specdec's own client transport, its stream framing, SSE parsing and the event loop it runs on."""
