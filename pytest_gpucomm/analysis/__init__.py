"""What a run's figures say beyond one case: the sweeps of one op over sizes (:mod:`.sweeps`), the curve of a
sweep and its latency-bandwidth fit (:mod:`.curve_fit`), today's curves against the baseline's and the
report's curves section (:mod:`.curves`), the copy matrices of device pairs (:mod:`.matrices`), the
stragglers and outlier nodes (:mod:`.stragglers`), and what the views draw of a baseline file
(:mod:`.baseline_figures`).

Pure numbers on measurements or report rows (numpy; scipy for a fitted model): no torch, no pytest.
"""
