"""A Toxiproxy-compatible fault server: the plugin's own, stdlib-only, loopback-only.

It speaks Toxiproxy 2.x's HTTP API (``/proxies``, ``/proxies/{name}``,
``/proxies/{name}/toxics``, ``/populate``, ``/reset``, ``/version``) and implements its toxics
(latency, bandwidth, slow_close, timeout, reset_peer, slicer, limit_data), so Toxiproxy
clients such as ``toxiproxy-python`` drive it unchanged. Run it with
``python -m pytest_mooncake.toxiproxy --listen 127.0.0.1:8474``; see ``--help``.

Where it differs from Toxiproxy, on purpose:

- ``--seed`` makes toxicity rolls, latency jitter and slicer sizes reproducible: each
  connection direction draws from its own generator seeded with (seed, proxy, connection
  number, direction). Real Toxiproxy has a ``-seed`` flag but discards the generator it builds
  from it (``cmd/server/server.go``), so its draws cannot be reproduced.
- Only loopback addresses are accepted for listen and upstream unless
  ``--allow-non-loopback`` is given; an empty ``listen`` means ``127.0.0.1:0`` (Toxiproxy
  would listen on every interface).
- Stricter validation: unknown or negative toxic attributes, toxicity outside [0, 1], and slicer
  settings that crash Toxiproxy (``average_size`` 0, ``size_variation >= average_size``) are
  400 errors instead of being accepted.
- A natural close is passed on as a half-close, so a reply still in flight after the client
  shut down its sending side gets through (Toxiproxy closes both directions at once).
- reset_peer always ends with a TCP RST (Toxiproxy only sets SO_LINGER 0 on connections that
  were opened while the toxic existed). Removing a timeout toxic closes the connections it
  applied to (Toxiproxy's ``Cleanup``), but not those its toxicity roll spared.
- Request bodies over 1 MiB are refused with 413.
"""

VERSION = "2.12.0-pytest-mooncake"

__all__ = ["VERSION"]
