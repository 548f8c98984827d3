"""The embedded llama.cpp server gets the cores other work leaves idle, at least one: its threads spin-wait for each
other at every step, so threads beyond the idle cores slow every step (the quick start on a busy 2-core machine)."""

from __future__ import annotations

import pytest

from judge.backends import local


@pytest.mark.parametrize("cores, load, threads", [
    (2, 0.0, 2),    # a quiet machine: every core
    (2, 0.6, 1),    # one core mostly busy
    (2, 14.0, 1),   # oversubscribed: one thread, never zero
    (8, 3.2, 5),
    (8, 0.0, 8),
])
def test_threads_are_the_idle_cores(monkeypatch, cores, load, threads):
    monkeypatch.setattr(local.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(local.os, "getloadavg", lambda: (load, load, load))
    assert local.idle_cores() == threads


def test_without_a_load_average_every_core(monkeypatch):
    def unavailable():
        raise OSError("no load average")

    monkeypatch.setattr(local.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(local.os, "getloadavg", unavailable)
    assert local.idle_cores() == 4
