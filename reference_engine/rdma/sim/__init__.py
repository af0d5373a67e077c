"""The simulation harness of the RDMA path: it drives the engine's RDMA code (``..``), which
never imports it.

- ``sim_verbs``: simulated NICs, nodes and fabric with fault rules (the verbs interface in one
  process); ``virtual_clock``: time that moves only when a step moves it.
- ``sim_cluster``: nodes on one fabric, one ``RdmaTransport`` each, a metadata directory and
  handshake RPC between them.
- ``scheduler``: the controlled scheduler (strategies, replay tokens); ``invariants``: the CO-9
  checker; ``scenarios``: the RFC's interleavings; ``exploration``: run, explore and replay them
  (the CLI is ``python -m reference_engine.rdma``).
"""
