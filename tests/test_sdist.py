"""The sdist is complete: it holds the tests, the fixtures and the SQL steps, a test run from the unpacked
sdist finds its fixtures, and the wheel built from that sdist carries every module of the package and every
transforms/*.sql (the test runs import the checkout through the editable install, so only this sees the wheel)."""
from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

SHIPPED = ("tests", "fixtures", "transforms", "docs")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """`python -m build` makes the sdist, then the wheel from the unpacked sdist (not from the checkout).
    --no-isolation: the build backend comes from the `lint` extra, so no download happens here."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def unpacked(dist, tmp_path_factory) -> Path:
    (sdist,) = dist.glob("*.tar.gz")
    into = tmp_path_factory.mktemp("sdist")
    with tarfile.open(sdist) as tar:
        tar.extractall(into, filter="data")
    (top,) = into.iterdir()
    return top


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_the_sdist_holds_every_test_fixture_step_and_doc_file_of_the_checkout(unpacked):
    for name in SHIPPED:
        assert _files(ROOT / name) - _files(unpacked / name) == set(), name


def test_a_test_run_from_the_unpacked_sdist_finds_its_fixtures(unpacked):
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_migrate_fixtures.py", "-k", "token_sums and basic-0.1.0"],
                          cwd=unpacked, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout


def test_the_wheel_carries_every_sql_step(dist):
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    steps = {f"lcm_etl/transforms/{p.name}" for p in (ROOT / "transforms").glob("*.sql")}
    assert steps and steps - names == set()


def test_the_wheel_carries_every_module_of_the_package(dist):
    """A package folder left out of pyproject's `packages` is missing from the wheel alone: an installed lcm-etl
    then fails on import while every other test, run against the checkout, passes."""
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "lcm_etl").rglob("*.py") if "__pycache__" not in p.parts}
    assert len(modules) > 50 and modules - names == set()


def test_the_wheel_carries_the_license_the_json_schemas_and_its_metadata(dist):
    """What an installed lcm-etl has without the checkout: its license, the --json reports' schemas
    (lcm_etl/schemas/, the files of docs/schemas/ byte for byte), and metadata naming the license, the platforms
    and pysqlite3 where it has a wheel."""
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        license_text = whl.read(f"{info}/licenses/LICENSE").decode()
        schemas = {p.name: whl.read(f"lcm_etl/schemas/{p.name}") for p in (ROOT / "docs" / "schemas").glob("*.json")}
        meta = whl.read(f"{info}/METADATA").decode()
    assert license_text == (ROOT / "LICENSE").read_text(encoding="utf-8") and license_text.startswith("MIT License")
    assert len(schemas) >= 10
    assert all(data == (ROOT / "docs" / "schemas" / name).read_bytes() for name, data in schemas.items())
    assert "License-Expression: MIT" in meta.splitlines()
    for classifier in ("Operating System :: POSIX :: Linux", "Operating System :: MacOS"):
        assert f"Classifier: {classifier}" in meta.splitlines()
    assert any(line.startswith("Requires-Dist: pysqlite3==0.6.1; ") for line in meta.splitlines())
