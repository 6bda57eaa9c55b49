"""Scanning a conversion's input: which files or rows are samples, their labels, and what is skipped and why.

* :mod:`.discover` -- what kind of SRC this is; :mod:`.folders` -- the scan of class folders (an ImageFolder).
* :mod:`.source` -- a scanned source's values, the label rule and readers shared by every kind.
* :mod:`.listing` -- CSV/JSONL listings; :mod:`.tars` -- existing tars; :mod:`.hf` -- Hugging Face datasets.
"""
