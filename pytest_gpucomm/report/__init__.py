"""Views of a run: the terminal table, the JSON report and the pytest-benchmark export (:mod:`.run`), reading
a saved report back (:mod:`.saved`), the plots (:mod:`.plots`, matplotlib) and the HTML page (:mod:`.html`).

No pytest: the plugin gathers the session's state into these (``plugin.reporting``), the ``gpucomm``
command reads saved files into them.
"""
