"""pytest plugin used by benchmarks/mutation.py to map each line of the mutated packages to the tests that run it.

Under `coverage run`, coverage's dynamic context is named after the running test and its phase ("<node id>|setup",
"<node id>|call"; a fixture's body runs in the setup of the first test that asks for it), and the same name is put in
the configuration coverage hands to subprocesses (its `patch = subprocess`) as their static context. Lines run while
collecting (a test module's top level) keep the empty context. Each test's seconds and outcome go to the JSON file
named by MUTATION_TIMES.
"""

from __future__ import annotations

import json
import os

import coverage
import pytest
from coverage.config import CoverageConfig

_times: dict[str, dict] = {}


def _switch(label: str) -> None:
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(label)
    if "COVERAGE_PROCESS_CONFIG" in os.environ:  # what a subprocess started now measures with
        config = CoverageConfig.deserialize(os.environ["COVERAGE_PROCESS_CONFIG"])
        config.context = label or None
        os.environ["COVERAGE_PROCESS_CONFIG"] = config.serialize()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _switch(f"{item.nodeid}|setup")
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _switch(f"{item.nodeid}|call")
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    _switch(f"{item.nodeid}|call")  # a module fixture's teardown runs in its last test's: as good as its call
    yield
    _switch("")


def pytest_runtest_logreport(report):
    row = _times.setdefault(report.nodeid, {"seconds": 0.0, "outcome": "passed"})
    row["seconds"] += report.duration
    if report.failed:
        row["outcome"] = "failed"
    elif report.skipped and report.when == "setup":
        row["outcome"] = "skipped"


def pytest_sessionfinish(session):
    path = os.environ.get("MUTATION_TIMES")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_times, f)
