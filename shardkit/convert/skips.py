"""Why a source file is not a sample: the reason codes recorded in a manifest's ``skipped`` list."""

from __future__ import annotations

import enum


class SkipReason(str, enum.Enum):
    """Why a source file is not in any shard (the ``reason`` code in the manifest)."""

    NOT_AN_IMAGE = "not_an_image"
    CORRUPT = "corrupt"
    EMPTY = "empty"
    TOO_MANY_PIXELS = "too_many_pixels"
    TOO_LARGE_FOR_JPEG = "too_large_for_jpeg"
    UNREADABLE = "unreadable"
    NOT_IN_CLASS_FOLDER = "not_in_class_folder"
    BAD_NAME = "bad_name"
    DUPLICATE_FILE = "duplicate_file"
    MISSING_FILE = "missing_file"
    NO_LABEL = "no_label"
    BAD_LABEL = "bad_label"
    DUPLICATE_PATH = "duplicate_path"
    BAD_METADATA = "bad_metadata"
    BAD_ROW = "bad_row"
    BAD_TARGET = "bad_target"
    NO_TEXT = "no_text"
    BAD_TEXT = "bad_text"
    MISSING_MASK = "missing_mask"
    BAD_MASK = "bad_mask"
    SIZE_MISMATCH = "size_mismatch"
    #: an appended image whose source bytes an earlier generation of the split already holds (``--append``)
    ALREADY_IN_SPLIT = "already_in_split"


class SkipImage(Exception):
    """Raised for a source file that cannot become a sample."""

    def __init__(self, reason: SkipReason, detail: str = ""):
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail
