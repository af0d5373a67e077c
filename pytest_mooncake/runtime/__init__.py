"""Runtime services of the plugin: processes, ports, logs, waits, caches and native builds."""
