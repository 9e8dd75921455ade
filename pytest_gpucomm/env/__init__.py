"""The machine and the job: which devices there are and the run's fingerprint (:mod:`.hardware`, with AMD's
management library in :mod:`.amd`, which reads it through :mod:`.amdsmi_reader` and :mod:`.amd_commands`, on
:mod:`.amd_sources`), what changed since a baseline was recorded (:mod:`.fingerprint`), which launcher started
this process (:mod:`.launch`) and where its ranks are (:mod:`.topology`).

No pytest; torch only where a device is asked about.
"""
