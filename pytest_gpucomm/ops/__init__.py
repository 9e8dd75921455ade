"""What is measured: the collectives (:mod:`.collectives`, their op base class :mod:`.collective_op`, a rank's
result :mod:`.collective_results`), the copies (:mod:`.copies`, timed by :mod:`.copy_timing` through the GPU
runtime's own copy call of :mod:`.engines`; launched mode's node-local copies :mod:`.node_copies`), the
inter-node pair test (:mod:`.nodes`), the training-step patterns (:mod:`.patterns`, on :mod:`.pattern_runs` and
:mod:`.model_shapes`), the rank side they share (a case's timed loop :mod:`.timed_case`, what the ranks agree on
:mod:`.across_ranks`, the single ops :mod:`.single_op_timing`), the timing engine (:mod:`.timing`), and the
ops' specs (:mod:`.specs`).

These run on the ranks (or in this process for copies); no pytest.
"""
