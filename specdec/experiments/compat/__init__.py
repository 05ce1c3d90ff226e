"""``specdec compat``: which engine features still work with speculation on.

A fixed probe set (``probes``) is sent to a baseline and a speculative server
(``probing``, over ``send``); each output is checked against its feature's
constraint (``checks``) and each cell classified (``classify``): works,
degrades, broken, refused, not tested, not offered. ``vocab`` is the tokenizer preflight
for a draft model; ``run`` writes the run folder (``compat.parquet``).
"""
