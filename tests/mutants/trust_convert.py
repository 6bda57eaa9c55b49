"""Mutants of a pool conversion's process lifetime (``shardkit/convert/encoder.py``): encoder processes that
outlive a main process killed with SIGKILL, and with them the forkserver and resource tracker they keep alive.
"""

ROW_NO_RESIDUE = (
    "Processes killed: SIGKILL of a --workers N conversion's main process leaves none of its processes running; "
    "a rerun completes byte-identically"
)

T = "tests/system/test_faults_convert.py"
T_NO_RESIDUE = f"{T}::test_killing_the_main_process_of_a_pool_conversion_leaves_no_process_and_a_rerun_completes"

MUTANTS = [
    {
        "id": "encoder-watch-not-started",
        "row": ROW_NO_RESIDUE,
        "file": "shardkit/convert/encoder.py",
        "old": "    if main_alive is not None:\n        threading.Thread(",
        "new": "    if False:\n        threading.Thread(",
        "tests": [T_NO_RESIDUE],
    },
    {
        "id": "encoder-watch-sees-the-death-and-returns",
        "row": ROW_NO_RESIDUE,
        "file": "shardkit/convert/encoder.py",
        "old": "    os._exit(MAIN_DIED_EXIT)",
        "new": "    return",
        "tests": [T_NO_RESIDUE],
    },
    {
        # under forkserver a worker's parent is the forkserver, which lives as long as any worker does
        "id": "encoder-watches-its-direct-parent",
        "row": ROW_NO_RESIDUE,
        "file": "shardkit/convert/encoder.py",
        "old": (
            "    try:\n        while True:\n            main_alive.recv_bytes()  # nothing is ever sent: this returns only "
            "by raising\n    except (EOFError, OSError):\n        pass\n"
        ),
        "new": "    parent = os.getppid()\n    while os.getppid() == parent:\n        threading.Event().wait(0.1)\n",
        "tests": [T_NO_RESIDUE],
    },
]
