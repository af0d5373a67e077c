"""Options and ini keys of the plugin parse, validate and show in the header."""

import pytest

PROBE = """
def test_probe(mc_config, pytestconfig):
    print("TARGET", mc_config.target, "SEED", mc_config.seed, "ETCD", mc_config.etcd,
          "TOXI", mc_config.toxiproxy, "SCHED", mc_config.schedules, "STRAT", mc_config.strategy,
          "CHAOS", mc_config.chaos_seconds, "REPORT", mc_config.report)
"""


def test_defaults(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PROBE)
    result = pytester.runpytest("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*TARGET reference SEED * ETCD () TOXI None SCHED 200 STRAT mix*"])
    result.stdout.fnmatch_lines(["mooncake: target=reference (*) seed=* (random; rerun with --mc-seed=*)"])


def test_command_line_values(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PROBE)
    result = pytester.runpytest(
        "-s", "--mc-seed=42", "--mc-target=reference:legacy", "--mc-schedules=7",
        "--mc-strategy=random", "--mc-chaos-seconds=2.5", "--mc-report=r.json",
        "--mc-toxiproxy=http://127.0.0.1:8474/",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*TARGET reference:legacy SEED 42 * TOXI http://127.0.0.1:8474 SCHED 7 STRAT random "
        "CHAOS 2.5 REPORT r.json*"
    ])
    result.stdout.fnmatch_lines(["mooncake: target=reference:legacy (*legacy*) seed=42"])


def test_ini_keys_and_cli_precedence(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nmc_seed = 7\nmc_target = reference:legacy\nmc_schedules = 3\n")
    pytester.makepyfile(PROBE)
    result = pytester.runpytest("-s")
    result.stdout.fnmatch_lines(["*TARGET reference:legacy SEED 7 * SCHED 3 *"])
    result = pytester.runpytest("-s", "--mc-seed=9", "--mc-target=reference")
    result.stdout.fnmatch_lines(["*TARGET reference SEED 9 * SCHED 3 *"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mc-target=nosuch"], "*--mc-target: unknown target 'nosuch'; known targets: *reference (the Python reference engine*"),
        (["--mc-target=reference:bogus"], "*unknown reference profile 'bogus'*reference:legacy*"),
        (["--mc-seed=abc"], "*--mc-seed must be an integer (got 'abc')*"),
        (["--mc-schedules=0"], "*--mc-schedules must be a positive integer (got '0')*"),
        (["--mc-strategy=dfs"], "*--mc-strategy must be mix, pct or random (got 'dfs')*"),
        (["--mc-etcd=nohostport"], "*--mc-etcd takes comma-separated host:port (got 'nohostport')*"),
        (["--mc-toxiproxy=localhost:8474"], "*--mc-toxiproxy must be a URL*"),
        (["--mc-verbs=rxe"], "*--mc-verbs must be sim or pyverbs:DEVICE*"),
        (["--mc-chaos-seconds=-1"], "*--mc-chaos-seconds must be a positive number*"),
    ],
)
def test_bad_values_are_one_line_usage_errors(pytester: pytest.Pytester, args, message) -> None:
    pytester.makepyfile(PROBE)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str()


def test_help_documents_every_option(pytester: pytest.Pytester) -> None:
    from pytest_mooncake.config.options import OPTIONS

    result = pytester.runpytest("--help")
    text = result.stdout.str()
    for opt in OPTIONS:
        assert opt.flag in text, f"{opt.flag} missing from --help"
        assert opt.ini in text, f"ini key {opt.ini} missing from --help"


def test_plugin_loads_once_and_can_be_disabled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PROBE)
    # Entry point already loaded it: -p must not register it a second time.
    result = pytester.runpytest_subprocess("-p", "pytest_mooncake", "-s")
    result.assert_outcomes(passed=1)
    assert result.stdout.str().count("mooncake: target=") == 1
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:pytest_mooncake", "test_plain.py")
    result.assert_outcomes(passed=1)
    assert "mooncake: target=" not in result.stdout.str()
    assert "conformance matrix" not in result.stdout.str()


def test_dash_p_loads_the_plugin_with_autoload_disabled(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(PROBE)
    # Control: with autoload off and no -p, the plugin (and its options) are really absent.
    result = pytester.runpytest_subprocess("--mc-seed=11")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --mc-seed=11*"])
    result = pytester.runpytest_subprocess("-p", "pytest_mooncake", "-s", "--mc-seed=11",
                                           "--mc-target=reference:legacy")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*TARGET reference:legacy SEED 11 *"])
    assert result.stdout.str().count("mooncake: target=reference:legacy") == 1
    result.stdout.fnmatch_lines(["mooncake: target=reference:legacy (*) seed=11*"])


def test_seed_is_per_test_and_order_independent(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_a(mc_seed, mc_rng):
            print("A", mc_seed, mc_rng.random())
        def test_b(mc_seed):
            print("B", mc_seed)
    """)
    first = pytester.runpytest("-s", "--mc-seed=5").stdout.str()
    second = pytester.runpytest("-s", "--mc-seed=5", "-k", "test_a").stdout.str()
    line = next(ln for ln in first.splitlines() if ln.startswith("A ") or " A " in ln)
    assert line.split("A ", 1)[1] in second
    a_seed = line.split("A ", 1)[1].split()[0]
    b_seed = next(ln for ln in first.splitlines() if "B " in ln).split("B ", 1)[1].split()[0]
    assert a_seed != b_seed
