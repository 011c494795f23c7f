"""agent-ls's line tracer: runs a Python test suite (pytest or unittest) and records, for each
test, the lines of the workspace's own files it executed, so agent-ls can rank where a bug
probably is (docs/locate.md). Nothing of the project is changed: this file and its output
live in .agent-ls/locate/. When the interpreter has coverage.py (5 or later), it collects the
lines, one dynamic context a test (`switch_context`, as pytest-cov does); otherwise Python
3.12+ traces with sys.monitoring (each line reported once per test, then disabled until the
next test) and older Pythons with sys.settrace. The record says which collected.

Usage: python tracer.py OUT ROOT pytest|unittest [ARGS...]
"""

import json
import os
import sys
import threading

# Absolute now: a test may change the working folder.
OUT, ROOT, RUNNER = os.path.abspath(sys.argv[1]), os.path.realpath(sys.argv[2]), sys.argv[3]
ARGS = sys.argv[4:]
SKIP = ("site-packages", "dist-packages", os.sep + ".agent-ls" + os.sep, os.sep + ".venv", os.sep + "venv" + os.sep)

current = [None]
per_test = {}
outcomes = {}
_wanted = {}


def wanted(filename):
    """The workspace-relative path of a file of the project's own, else None."""
    rel = _wanted.get(filename, False)
    if rel is not False:
        return rel
    real = os.path.realpath(filename)
    rel = None
    # `<frozen ...>`, `<string>`: code with no file of its own. What to skip is looked for
    # below the workspace only: the workspace may itself sit in `.agent-ls/worktrees/`.
    if not filename.startswith("<") and real.startswith(ROOT + os.sep) and os.path.isfile(real):
        rel = os.path.relpath(real, ROOT)
        if any(s in os.sep + rel for s in SKIP):
            rel = None
    _wanted[filename] = rel
    return rel


def hit(filename, line):
    test = current[0]
    if test is None:
        return
    rel = wanted(filename)
    if rel is not None:
        per_test.setdefault(test, {}).setdefault(rel, set()).add(line)


def coverage_py():
    """The interpreter's coverage.py, when it has one that switches contexts (5 or later)."""
    try:
        import coverage

        if int(coverage.__version__.split(".")[0]) >= 5:
            return coverage
    except Exception:
        pass
    return None


COVERAGE = coverage_py()
if COVERAGE is not None:
    COLLECTOR = "coverage.py " + COVERAGE.__version__
    # No configuration file of the project's: its own `[run]` settings (a data file, a
    # `source` of its choosing, its dynamic contexts) would change what is measured.
    cov = COVERAGE.Coverage(data_file=None, config_file=False, source=[ROOT])
    cov.start()

    def begin(test):
        current[0] = test
        cov.switch_context(test)

    def end():
        cov.switch_context("")
        current[0] = None

    def collected():
        """Per test, the lines coverage.py recorded in the project's own files."""
        cov.stop()
        data = cov.get_data()
        for filename in data.measured_files():
            rel = wanted(filename)
            if rel is None:
                continue
            for line, contexts in data.contexts_by_lineno(filename).items():
                for test in contexts:
                    if test:
                        per_test.setdefault(test, {}).setdefault(rel, set()).add(line)

elif hasattr(sys, "monitoring"):
    COLLECTOR = "agent-ls's tracer (sys.monitoring)"
    mon = sys.monitoring
    TOOL = next(
        (i for i in (mon.COVERAGE_ID, 3, 4) if mon.get_tool(i) is None), mon.COVERAGE_ID
    )
    mon.use_tool_id(TOOL, "agent-ls")

    def on_line(code, line):
        if wanted(code.co_filename) is None:
            return mon.DISABLE
        hit(code.co_filename, line)
        return mon.DISABLE

    mon.register_callback(TOOL, mon.events.LINE, on_line)

    def begin(test):
        current[0] = test
        mon.restart_events()
        mon.set_events(TOOL, mon.events.LINE)

    def end():
        current[0] = None

else:
    COLLECTOR = "agent-ls's tracer (sys.settrace)"

    def tracer(frame, event, arg):
        if wanted(frame.f_code.co_filename) is None:
            return None
        if event == "line":
            hit(frame.f_code.co_filename, frame.f_lineno)
        return tracer

    def begin(test):
        current[0] = test
        threading.settrace(tracer)
        sys.settrace(tracer)

    def end():
        sys.settrace(None)
        threading.settrace(None)
        current[0] = None


def run_pytest():
    import pytest

    class Plugin:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            begin(item.nodeid)
            try:
                yield
            finally:
                end()

        def pytest_runtest_logreport(self, report):
            if report.failed:
                outcomes[report.nodeid] = True
            else:
                outcomes.setdefault(report.nodeid, False)

    # pytest-cov would start a coverage of its own, which pauses ours for the whole session:
    # with coverage.py collecting, it is told not to measure (`--no-cov` keeps its options,
    # an `addopts = --cov=pkg` among them, valid).
    no_cov = []
    if COVERAGE is not None:
        import importlib.util

        disabled = any(a in ("no:pytest_cov", "no:cov") for a in ARGS)
        if importlib.util.find_spec("pytest_cov") is not None and not disabled:
            no_cov = ["--no-cov"]
    return pytest.main(["-p", "no:cacheprovider", *no_cov, *ARGS], plugins=[Plugin()])


def run_unittest():
    import unittest

    class Result(unittest.TextTestResult):
        def startTest(self, test):
            begin(test.id())
            super().startTest(test)

        def stopTest(self, test):
            super().stopTest(test)
            end()

        def addFailure(self, test, err):
            outcomes[test.id()] = True
            super().addFailure(test, err)

        def addError(self, test, err):
            outcomes[test.id()] = True
            super().addError(test, err)

        def addSuccess(self, test):
            outcomes.setdefault(test.id(), False)
            super().addSuccess(test)

    runner = unittest.TextTestRunner(resultclass=Result, stream=sys.stderr, verbosity=1)
    program = unittest.main(
        module=None, argv=["python -m unittest", *ARGS], testRunner=runner, exit=False
    )
    return 0 if program.result.wasSuccessful() else 1


sys.path.insert(0, os.getcwd())
code = run_pytest() if RUNNER == "pytest" else run_unittest()
if COVERAGE is not None:
    collected()
tests = [
    {"test": t, "failed": bool(outcomes.get(t, False)), "lines": {f: sorted(ls) for f, ls in files.items()}}
    for t, files in per_test.items()
]
with open(OUT, "w", encoding="utf-8") as f:
    json.dump({"collector": COLLECTOR, "tests": tests}, f)
sys.exit(int(code) if isinstance(code, int) else 0)
