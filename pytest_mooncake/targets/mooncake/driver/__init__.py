"""The driver process that runs a real build's Python API, and the test side of it:
``mooncake_driver.py`` (run with the build's python, never imported: only the standard library
and the wheel), ``control_channel.py`` (JSON lines over a loopback socket) and
``engine_proxies.py`` (``EngineHandle`` over a driver running a ``TransferEngine``)."""
