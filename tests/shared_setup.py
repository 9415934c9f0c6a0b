"""A pytest plugin: the time of shared fixtures, told apart from the test that happened to pay it.

pytest's junit XML gives each test setup + call + teardown. A module-scoped fixture (a Slurm cluster brought up,
~15 s under load) is set up in its module's first test and torn down in its last, so those two tests carry a cost
every test of the module shares. This plugin times each set-up and finalization of a fixture scoped wider than a
function and puts it on the test whose setup or teardown ran it, as junit properties:

    shared_s   the seconds of those set-ups and finalizations (nested ones counted once)
    shared     which fixtures, and their scopes: "slurm (module) set up; slurm (module) torn down"

scripts/citime.py subtracts shared_s from the test's time and lists the shared work as its own line, so the
slowest-test list shows what each test costs and, apart, what a module's cluster costs. Function-scoped fixtures
stay the test's own. Loaded by tests/conftest.py (pytest_plugins).
"""

from __future__ import annotations

import time

import pytest

SHARED_SCOPES = frozenset({"class", "module", "package", "session"})


class _Clock:
    def __init__(self) -> None:
        # shared set-ups in progress (one inside another is counted in the outer one)
        self.depth = 0
        self.seconds = 0.0
        self.what: list[str] = []
        self.last = 0.0  # teardown: when the previous fixture finished finalizing

    def reset(self) -> None:
        self.seconds, self.what, self.last = 0.0, [], time.monotonic()


CLOCK = _Clock()


def _scope(fixturedef) -> str:
    return str(fixturedef.scope)  # "function", "module"... (pytest's ScopeName)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    shared = _scope(fixturedef) in SHARED_SCOPES
    start = time.monotonic()
    CLOCK.depth += shared
    try:
        yield
    finally:
        CLOCK.depth -= shared
        if shared and CLOCK.depth == 0:
            CLOCK.seconds += time.monotonic() - start
            CLOCK.what.append(f"{fixturedef.argname} ({_scope(fixturedef)}) set up")


def pytest_fixture_post_finalizer(fixturedef, request):
    """Called after each fixture's finalizers ran: a shared one's time is since the previous fixture finished
    (the function-scoped ones, finalized first, are each timed from the one before them and not counted)."""
    now = time.monotonic()
    if _scope(fixturedef) in SHARED_SCOPES:
        CLOCK.seconds += now - CLOCK.last
        CLOCK.what.append(f"{fixturedef.argname} ({_scope(fixturedef)}) torn down")
    CLOCK.last = now


def _record(item) -> None:
    if CLOCK.what:
        item.user_properties.append(("shared_s", f"{CLOCK.seconds:.2f}"))
        item.user_properties.append(("shared", "; ".join(CLOCK.what)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    CLOCK.reset()
    yield
    _record(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    CLOCK.reset()
    yield
    _record(item)
