"""The benchmarks' --workdir and --dir: a directory that does not exist yet is made (with
its parents), as bench/bigstate.py makes its own, never a traceback from tempfile. One
helper does it for every script (bench.common.workdir); the two scripts that ran with a
missing --dir and failed are run here, as small as they go."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import workdir
from tests.conftest import REPO


def test_the_shared_helper_makes_the_directory_and_its_parents(tmp_path: Path) -> None:
    want = tmp_path / "a" / "b"
    assert workdir(str(want)) == want and want.is_dir()
    assert workdir(want) == want  # there already: kept as it is
    assert workdir(None) is None  # no option: the script makes a temporary directory


@pytest.mark.parametrize(
    "args",
    [
        ["bench.take", "--steps", "10", "--takes", "1", "--rounds", "1", "--no-uncached"],
        ["bench.workflow", "--steps", "10", "--runs", "1"],
    ],
    ids=lambda a: a[0],
)
def test_a_bench_run_with_a_new_directory_makes_it(tmp_path: Path, args: list[str]) -> None:
    where = tmp_path / "not" / "yet"
    p = subprocess.run([sys.executable, "-m", *args, "--dir", str(where)], capture_output=True, cwd=REPO, timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr.decode(), p.stderr.decode()[-2000:]
    assert where.is_dir()
