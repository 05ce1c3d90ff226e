"""Experiments built on the replay's client, above it: the compatibility matrix (``compat``:
which speculation works with which feature, engine by engine) and the stability probes
(``stability``: how a server behaves under faults). Each uses the replay's client, servers
and run folder; the replay imports neither."""
