"""sinfo --Node parsing: the virtual node's capacity comes from it."""

from hpkctl.jobs.nodes import parse_sinfo


def test_node_in_two_partitions_is_one_node_with_gpus_counted_once() -> None:
    nodes = parse_sinfo("n1|gpu*|64|256000|gpu:a100:4(S:0-1),tmp:1|mixed\n"
                        "n1|batch|64|256000|gpu:a100:4(S:0-1),tmp:1|mixed\n"
                        "n2|batch|32|128000+|(null)|drained*\n"
                        "garbage line\n")
    assert [(n.name, n.partitions, n.cpus, n.memory_mb, n.gpus, n.state) for n in nodes] == [
        ("n1", ("gpu", "batch"), 64, 256000, 4, "mixed"),
        ("n2", ("batch",), 32, 128000, 0, "drained"),
    ]


def test_untyped_gpu_gres() -> None:
    (node,) = parse_sinfo("a|p|8|1000|gpu:2|idle\n")
    assert node.gpus == 2
