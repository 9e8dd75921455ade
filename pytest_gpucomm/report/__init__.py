"""One report document, many views: the run's document (:mod:`.document`: rows with their verdicts, the
levels, the curves, the stragglers, the fingerprint, the settings), made once at the end of a session, read
back from a saved JSON report (:mod:`.saved` reads and checks the file), or made again by ``gpucomm
compare``; and its views: the text of its rows (:mod:`.run`), the terminal summary (:mod:`.terminal`), the
JSON report and the pytest-benchmark export (:mod:`.exports`), the plots (:mod:`.plots`, matplotlib) and the
HTML page (:mod:`.html`).

No pytest: the plugin makes the session's document (``plugin.reporting``), the ``gpucomm`` command reads
saved files into documents.
"""
