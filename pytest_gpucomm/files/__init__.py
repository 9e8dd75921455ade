"""Files read and written safely: atomic writes that readers never see half-done (:mod:`.atomic`) and the
JSON of a file with one wording for what is wrong with it (:mod:`.jsontext`).  Standard library only.
"""
