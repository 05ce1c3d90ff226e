"""All click code: the commands (``main``, ``capture``, ``replay``, ``traffic``,
``stability``, ``validate``), their shared options and parameter types, and the
one place where specdec's errors become click's (``common.handle_errors``).

The top layer of the import contract (pyproject.toml): nothing below imports it.
"""
