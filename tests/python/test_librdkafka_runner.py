"""tests/librdkafka/run.py refuses a librdkafka test that "passed" without running anything.

Under quick mode (-Q) a test whose every subtest is a non-quick one returns from each SUB_TEST()
at once and passes in 0.000 s without a request to the broker (0018, 0019, 0026, 0089 were
allowlisted so for a session). The summaries below are test-runner's own, colours included.
"""

import importlib.util
from pathlib import Path

RUN_PY = Path(__file__).resolve().parents[2] / "tests" / "librdkafka" / "run.py"


def runner():
    spec = importlib.util.spec_from_file_location("librdkafka_run", RUN_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summary(*rows: tuple[str, str, str]) -> str:
    """A test-runner closing summary as it prints it, ANSI colours included."""
    lines = ["\x1b[0mTEST 20261204225424 (bare, scenario default) SUMMARY", "#" + "=" * 66 + "#"]
    for name, state, secs in rows:
        lines.append(f"|\x1b[32m {name:<40} | {state:>10} | {secs:>8}s \x1b[0m|")
    lines.append("#" + "=" * 66 + "#")
    return "\n".join(lines) + "\n"


def test_a_test_whose_every_part_took_no_time_ran_nothing():
    run = runner()
    # 0089 under -Q, as in the main branch's run of session 13.
    log = summary(("<MAIN>", "PASSED", "0.201"), ("0089_max_poll_interval", "PASSED", "0.000"))
    assert not run.something_ran(log)


def test_skipped_parts_and_an_empty_log_ran_nothing():
    run = runner()
    assert not run.something_ran(
        summary(("<MAIN>", "PASSED", "0.100"), ("0153_memberid", "SKIPPED", "0.000"))
    )
    assert not run.something_ran("")


def test_one_part_that_took_time_is_enough():
    run = runner()
    # 0035 answers in milliseconds; 0055's mock part is empty under -Q, its CreateTopics is not.
    assert run.something_ran(
        summary(("<MAIN>", "PASSED", "0.200"), ("0035_api_version", "PASSED", "0.009"))
    )
    assert run.something_ran(
        summary(
            ("<MAIN>", "PASSED", "1.211"),
            ("0055_producer_latency", "PASSED", "1.011"),
            ("0055_producer_latency_mock", "PASSED", "0.000"),
        )
    )


def test_main_alone_does_not_count():
    run = runner()
    assert not run.something_ran(summary(("<MAIN>", "PASSED", "5.000")))


def test_allowlist_markers_choose_the_runner_flags():
    run = runner()
    listed = run.parse_allowlist(
        "# a comment\n0012  # plain\n0018 full  # c\n0049 sockem  # c\n0094 sockem full\n"
    )
    assert listed == {"0012": set(), "0018": {"full"}, "0049": {"sockem"},
                      "0094": {"sockem", "full"}}
    assert run.runner_flags(listed["0012"]) == ["-p1", "-Q", "-E", "-K"]
    assert run.runner_flags(listed["0018"]) == ["-p1", "-E", "-K"]
    assert run.runner_flags(listed["0049"]) == ["-p1", "-Q", "-K"]
    assert run.runner_flags(listed["0094"]) == ["-p1", "-K"]
    # `broker` leaves out the parts flagged local (mock cluster); `sasl` changes no flag.
    assert run.runner_flags({"full", "broker"}) == ["-p1", "-E", "-K", "-L"]
    assert run.runner_flags({"sasl"}) == ["-p1", "-Q", "-E", "-K"]


def test_an_unknown_or_repeated_marker_is_refused():
    run = runner()
    for line in ["0049 sockme", "0049 full full", "0049 quick"]:
        try:
            run.parse_allowlist(line)
        except SystemExit as e:
            assert line in str(e)
        else:
            raise AssertionError(f"{line!r} was read")


def test_the_committed_allowlist_reads():
    run = runner()
    listed = run.allowlist()
    assert len(listed) >= 79
    assert all(m <= run.MARKERS for m in listed.values())
