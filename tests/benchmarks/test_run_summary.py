"""The benchmark's summary: each ratio compares cells of the same round, and with several
gunicorn thread counts a target is compared with the bare view of its own process."""

from __future__ import annotations

from typing import Any

from benchmarks.run import TARGETS, parse_args, schedule, summarize, target_label


def cell(round_: int, workload: str, target: str, rps: float) -> dict[str, Any]:
    return {
        "round": round_, "workload": workload, "concurrency": 8, "workers": 1, "target": target, "rps": rps,
        "p50_ms": 1.0, "p99_ms": 2.0, "errors": 0, "requests": int(rps), "resumes": 0,
        "server_cpu_ms_per_op": 0.5, "rss_mib": 100.0, "gen_cpu_pct": 10.0, "error_samples": [],
    }  # fmt: skip


def test_a_gunicorn_target_is_named_by_its_thread_count_only_when_several_are_measured() -> None:
    django, sdk = TARGETS["django-gunicorn"], TARGETS["sdk-uvicorn"]
    assert target_label(django, 8, [8]) == "django-gunicorn"
    assert target_label(django, 1, [1, 8]) == "django-gunicorn/t1"
    assert target_label(sdk, 1, [1, 8]) == "sdk-uvicorn"
    assert parse_args(["--threads", "1,8"]).threads_list == [1, 8]
    assert parse_args([]).threads_list == [8]


def test_ratios_pair_cells_of_one_round_and_one_process() -> None:
    cells = []
    for round_, load in ((1, 1.0), (2, 2.0), (3, 3.0)):  # the machine slows down: rates halve, then...
        cells += [
            cell(round_, "bare", "django-gunicorn/t1", 2000 / load),
            cell(round_, "bare", "django-gunicorn/t8", 1000 / load),
            cell(round_, "modern-call", "django-gunicorn/t1", 1800 / load),
            cell(round_, "modern-call", "django-gunicorn/t8", 800 / load),
            cell(round_, "modern-call", "sdk-uvicorn", 900 / load),
        ]
    rows = {(r["workload"], r["target"]): r for r in summarize(cells, [1, 8])}
    one, eight = rows[("modern-call", "django-gunicorn/t1")], rows[("modern-call", "django-gunicorn/t8")]
    assert round(one["vs_bare"], 3) == 0.9 and round(eight["vs_bare"], 3) == 0.8  # its own process's bare
    assert round(one["vs_sdk"], 3) == 2.0 and round(eight["vs_sdk"], 3) == round(800 / 900, 3)
    # The SDK's bare view is Django's at the first thread count listed.
    assert round(rows[("modern-call", "sdk-uvicorn")]["vs_bare"], 3) == 0.45
    order = [r["target"] for r in summarize(cells, [1, 8]) if r["workload"] == "modern-call"]
    assert order == ["django-gunicorn/t1", "django-gunicorn/t8", "sdk-uvicorn"]


def test_the_bare_view_runs_next_to_the_call_and_every_other_round_reverses_the_servers() -> None:
    workloads = ["modern-call", "legacy-call", "modern-elicit", "bare"]
    first = schedule(workloads, [8], ["django", "sdk"], 1)
    assert first == [
        ("modern-call", 8, "django"),
        ("modern-call", 8, "sdk"),
        ("bare", 8, "django"),
        ("bare", 8, "sdk"),
        ("legacy-call", 8, "django"),
        ("legacy-call", 8, "sdk"),
        ("modern-elicit", 8, "django"),
        ("modern-elicit", 8, "sdk"),
    ]
    second = schedule(workloads, [8], ["django", "sdk"], 2)
    assert [(w, s) for w, _, s in second[:4]] == [
        ("modern-call", "sdk"),
        ("modern-call", "django"),
        ("bare", "sdk"),
        ("bare", "django"),
    ]
    # Without the call, the bare view keeps its place last; with several client counts, each
    # count's cells run together (a ratio pairs cells of one count); every cell runs once.
    assert schedule(["bare", "legacy-call"], [1, 8], ["django"], 1) == [
        ("legacy-call", 1, "django"),
        ("bare", 1, "django"),
        ("legacy-call", 8, "django"),
        ("bare", 8, "django"),
    ]
