"""Node affinity: the assignment, the shares, the layout an elastic resume re-plans, the node count."""

T = "tests/plan/test_affinity_oracle.py"
L = "tests/loader/test_node_affinity.py"

MUTANTS = [
    {
        "id": "affinity-giver-gives-to-its-share-exactly",
        "row": "Node affinity",
        "file": "shardkit/plan/affinity.py",
        "old": "give = 2 * (k + 1) * before + (k + 1) * sz <=",
        "new": "give = 2 * (k + 1) * before + 2 * (k + 1) * sz <=",
        "tests": [f"{T}::test_assignment_matches_the_reference_and_moves_only_the_new_nodes_shards"],
    },
    {
        "id": "affinity-order-depends-on-node-count",
        "row": "Node affinity",
        "file": "shardkit/plan/affinity.py",
        "old": "rank = stable_rank(len(sizes), seed)\n    total",
        "new": "rank = stable_rank(len(sizes), seed + nodes)\n    total",
        "tests": [f"{T}::test_assignment_matches_the_reference_and_moves_only_the_new_nodes_shards"],
    },
    {
        "id": "affinity-no-lending",
        "row": "Node affinity",
        "file": "shardkit/plan/affinity.py",
        "old": "np.array([min(have, targets[n])], np.int64)",
        "new": "np.array([have], np.int64)",
        "tests": [f"{T}::test_one_dataset_exactly_once_equal_batches_from_its_node"],
    },
    {
        "id": "affinity-node-share-shuffled-globally",
        "row": "Node affinity",
        "file": "shardkit/plan/epoch.py",
        "old": "* (world_size // nodes)",
        "new": "* (world_size // nodes) // 2",
        "tests": [f"{T}::test_one_dataset_exactly_once_equal_batches_from_its_node"],
    },
    {
        "id": "affinity-layout-of-the-current-topology",
        "row": "Node affinity",
        "file": "shardkit/plan/epoch.py",
        "old": "world_size, nodes = history[0].world_size, history[0].nodes",
        "new": "pass",
        "tests": [f"{T}::test_node_count_changes_mid_epoch_deliver_every_sample_once"],
    },
    {
        "id": "affinity-position-box-drops-nodes",
        "row": "Node affinity",
        "file": "shardkit/loader/transport.py",
        "old": "(s.world_size, s.num_workers, s.batches_done, s.nodes)",
        "new": "(s.world_size, s.num_workers, s.batches_done, 1)",
        "tests": [f"{L}::test_resume_same_topology_and_another_node_count"],
    },
    {
        "id": "affinity-state-forgets-nodes",
        "row": "Node affinity",
        "file": "shardkit/loader/state.py",
        "old": 'saved_nodes = _int(state, "nodes", 1) if "nodes" in state else 1',
        "new": "saved_nodes = nodes",
        "tests": [f"{L}::test_resume_same_topology_and_another_node_count"],
    },
    {
        "id": "affinity-torchrun-group-unchecked",
        "row": "Node affinity",
        "file": "shardkit/plan/world.py",
        "old": "or (group >= 0 and group != rank // local)",
        "new": "",
        "tests": [f"{T}::test_node_count_from_torchrun_environment"],
    },
]
