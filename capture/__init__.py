"""specdec-capture: a vLLM general plugin that records one row per request per
engine step (verify rounds included) into Parquet, plus its CLI helpers.

Enable it by setting ``SPECDEC_CAPTURE_DIR`` in the environment of the vLLM
process; without it the plugin does nothing. Modules: ``plugin`` (the hooks),
``writer`` (bounded, fork-safe column buffers -> Parquet parts), ``settings``
(the environment, checked once), ``cli`` and ``reconcile``. Names of the
variables and part files come from ``specdec.runfolder``.
"""
