"""What a run's figures say beyond one case: the bandwidth curve of each sweep (:mod:`.curves`), the copy
matrices of device pairs (:mod:`.matrices`), the stragglers and outlier nodes (:mod:`.stragglers`).

Pure numbers on measurements or report rows (numpy; scipy for a fitted model): no torch, no pytest.
"""
