"""specdec: does speculative decoding really speed up *your* service?

Import namespace root. The parts live in top-level folders of the repository
and install as ``specdec.capture``, ``specdec.replay``, ``specdec.analytics``,
``specdec.schemas`` and ``specdec.sql`` (SQL models as package data).
"""
