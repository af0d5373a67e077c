"""The Mooncake reference engine: a Python implementation of the metadata, RDMA and master
recovery protocols (profile ``rfc``) and of the behaviour before them (profile ``legacy``).

It is a library and a set of processes (``python -m reference_engine ...``); it knows nothing
of pytest.
"""

__version__ = "0.1.0"
