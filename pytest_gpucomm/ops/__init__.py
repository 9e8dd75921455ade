"""What is measured: the collectives (:mod:`.collectives`), the copies (:mod:`.copies`, through the GPU
runtime's own copy call of :mod:`.engines`), the inter-node pair test (:mod:`.nodes`), the training-step
patterns (:mod:`.patterns`), and the timing engine they share (:mod:`.timing`).

These run on the ranks (or in this process for copies); no pytest.
"""
