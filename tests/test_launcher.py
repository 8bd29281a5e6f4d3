"""A Ctrl-C while the `workcenter` command is still importing (about half a second:
``workcenter/__init__.py`` loads the application, the stores and the models) printed
Python's KeyboardInterrupt traceback, since the CLI's handlers come only after the
import. The console script now goes to a launcher outside the package, which imports
the CLI under ``except KeyboardInterrupt`` and exits 130 with one line (ADR-0106).

The interrupt is sent while the child is known to be importing, not after a guessed
delay: a ``sitecustomize`` of the test's (on the child's ``PYTHONPATH``, never in
Workcenter) holds the import of one module, after touching a file the test waits for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from workcenter.application import WorkCenter

ROOT = Path(__file__).resolve().parents[1]
CONSOLE_SCRIPT = Path(sys.executable).with_name("workcenter")

SITECUSTOMIZE = """
import os, pathlib, sys, time

class HeldImport:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["HELD_IMPORT"]:
            sys.meta_path.remove(self)
            pathlib.Path(os.environ["IMPORTING"]).touch()
            time.sleep(60)
        return None

sys.meta_path.insert(0, HeldImport())
"""


def entry_point() -> tuple[str, str]:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["workcenter"].partition(":")
    return module, function


def interrupted_while_importing(
    command: list[str], held: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    importing = tmp_path / "importing"
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "HELD_IMPORT": held,
        "IMPORTING": str(importing),
    }
    child = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not importing.exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, f"{held} was never imported"
            time.sleep(0.02)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    return subprocess.CompletedProcess(command, child.returncode, out, err)


def test_the_entry_point_is_outside_the_package() -> None:
    """Inside it, ``workcenter/__init__.py`` would be imported before any handler."""
    module, _ = entry_point()
    assert module.partition(".")[0] != "workcenter"
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert module in config["py-modules"]  # shipped by the distribution


# The package itself (its first import), a module it loads, and the CLI's last one.
HELD = ["workcenter", "workcenter.application", "workcenter.adapters.cli_serve"]


@pytest.mark.parametrize("held", HELD)
def test_a_ctrl_c_while_the_command_imports_is_one_line_and_exit_130(
    held: str, tmp_path: Path
) -> None:
    module, function = entry_point()
    # What the console script pip writes runs, from the entry point pyproject names.
    script = f"import sys; from {module} import {function}; sys.exit({function}())"
    done = interrupted_while_importing([sys.executable, "-c", script, "--help"], held, tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr.splitlines() == [
        "interrupted by SIGINT: workcenter stopped while it was starting; nothing was done"
    ]
    assert done.stdout == ""


def test_the_installed_command_does_the_same(tmp_path: Path) -> None:
    module, _ = entry_point()
    if f"from {module} import" not in CONSOLE_SCRIPT.read_text():
        pytest.skip("the installed console script predates the launcher: install again")
    done = interrupted_while_importing(
        [str(CONSOLE_SCRIPT), "--help"], "workcenter.application", tmp_path
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130, (done.returncode, done.stderr)


def test_a_ctrl_c_while_a_short_verb_works_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """A verb with no stop of its own (ADR-0100's long verbs and the worker have theirs)
    is stopped by Ctrl-C with one line and 130, not click's "Aborted!" and 1."""
    db = tmp_path / "wc.db"
    WorkCenter.open(str(db)).close()
    script = (
        "import os, signal, sys, time\n"
        "from workcenter.application import WorkCenter\n"
        "def interrupted(*args, **kwargs):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(30)\n"
        "WorkCenter.list_work_items = interrupted\n"
        "from workcenter_launcher import main\n"
        f"sys.argv = ['workcenter', '--db', {str(db)!r}, 'list']\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in done.stderr and "Aborted" not in done.stderr, done.stderr
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr.splitlines()[-1] == (
        "interrupted by SIGINT: workcenter list stopped before it finished"
        " (a change it was making is recorded whole or not at all)"
    )
