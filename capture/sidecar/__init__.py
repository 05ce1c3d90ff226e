"""The sidecar beside a staging vLLM server: ``service`` (the process: scrapes,
compaction, ``/healthz``, ``/metrics``), ``lake`` (compacting capture part files
into the date-partitioned lake, each page checked first) and ``metrics`` (the
Prometheus text it serves). It can run the recording proxy (``capture.proxy``)
in front of the same server."""
