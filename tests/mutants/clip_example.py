"""Mutants of ``examples/train_clip.py`` (image + caption batches): the toy CLIP step on the captioned
sample data it makes itself. Tests: ``tests/integrations/test_clip_example.py``."""

ROW_TRAINS = (
    "Examples: train_clip.py makes captioned data without labels, loads (image, text) batches and runs every "
    "step it is asked for, across epochs"
)
ROW_ARGS = "Examples: a bad argument or a dataset without captions is a one-line error, no traceback"

T = "tests/integrations/test_clip_example.py::"
TRAINS = T + "test_clip_example_trains_on_its_own_captioned_data"
ARGS = T + "test_clip_example_bad_arguments_are_one_line"

F = "examples/train_clip.py"

MUTANTS = [
    {
        "id": "clip-stops-after-one-epoch",  # the step budget silently cut to one epoch
        "row": ROW_TRAINS,
        "file": F,
        "old": "        epoch += 1\n",
        "new": "        break\n",
        "tests": [TRAINS],
    },
    {
        "id": "clip-demo-data-expects-labels",  # the listing has no label column: the convert must say labelled=False
        "row": ROW_TRAINS,
        "file": F,
        "old": 'source=ScanConfig(text_col="caption", labelled=False)',
        "new": 'source=ScanConfig(text_col="caption")',
        "tests": [TRAINS],
    },
    {
        "id": "clip-captions-not-written",  # the images converted without their captions
        "row": ROW_TRAINS,
        "file": F,
        "old": 'w.writerow([os.path.join("images", shape, name), caption(shape, i)])',
        "new": 'w.writerow([os.path.join("images", shape, name), ""])',
        "tests": [TRAINS],
    },
    {
        "id": "clip-batch-of-one-accepted",  # InfoNCE with no negatives: loss 0, nothing learnt
        "row": ROW_ARGS,
        "file": F,
        "old": "if args.batch_size < 2:",
        "new": "if args.batch_size < 1:",
        "tests": [ARGS],
    },
    {
        "id": "clip-load-error-traceback",  # a dataset without text fails with a traceback instead of one line
        "row": ROW_ARGS,
        "file": F,
        "old": "except (ValueError, OSError) as e:",
        "new": "except OSError as e:",
        "tests": [ARGS],
    },
]
