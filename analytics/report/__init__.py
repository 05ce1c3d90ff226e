"""What a person reads: ``write`` (``specdec report RUN_DIR``: the self-contained
HTML page and the terminal summary), ``data`` (the report model both render),
``verdict`` (the verdict in words), ``summary`` (the terminal text),
``side_by_side`` (a run of named arms), ``compare`` (two runs side by side),
``page`` and ``html`` (the page's shell and safe HTML), ``chart_text`` (labels
made safe for a chart renderer). Everything here reads the marts; nothing is
computed that the marts do not already hold."""
