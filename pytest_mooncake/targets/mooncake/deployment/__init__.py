"""The handles of an existing deployment (the ``cluster`` target, ``placements/existing_cluster``):
``node_control.py`` (components driven over SSH, within the file's allowed faults),
``engines_on_nodes.py`` and ``masters_on_nodes.py`` (engine and master-cluster handles), and
``control_wires.py`` (what answers on a component's control channel, by protocol)."""
