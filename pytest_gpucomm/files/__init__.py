"""Files read and written safely: atomic writes that readers never see half-done (:mod:`.atomic`), the
bytes of a file read so that no FIFO, device or huge file can hang or exhaust the reader (:mod:`.reading`),
the JSON of a file with one wording for what is wrong with it (:mod:`.jsontext`), and the format versions of
reports and baselines, every earlier one upgraded on read (:mod:`.formats`).  Standard library only.
"""
