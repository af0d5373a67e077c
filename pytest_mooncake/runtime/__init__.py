"""What the framework runs on, without pytest: processes, ports, deadlines, the etcd and
Toxiproxy server processes, native builds. New packages (verbs, releases, nodes) build on this
layer only."""
