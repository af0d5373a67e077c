"""A server process stops on SIGTERM even when the kernel hands the signal to another thread."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import signal, threading, time
    from reference_engine.stop_signals import stop_on_signals, wait_until_stopped

    stopped = threading.Event()
    stop_on_signals(stopped)

    def elsewhere():
        time.sleep(0.5)  # let the main thread settle into its wait first
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # to this thread, not main

    threading.Thread(target=elsewhere, daemon=True).start()
    wait_until_stopped(stopped)
    print("stopped", flush=True)
""")


def test_sigterm_to_a_worker_thread_still_stops_the_main_thread():
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 0 and "stopped" in proc.stdout, proc.stderr
