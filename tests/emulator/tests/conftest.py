"""Fixtures: one emulator for the whole pytest session, one fresh AWS account per test.

If ``KFAWS_EMULATOR_ENDPOINT`` is set (run_tests.sh starts the emulator and
sets it), the tests use that emulator; otherwise this session starts its own
and stops it at the end. Tests never reset the emulator: each one works in
its own random 12-digit account, selected by using the account id as the
access key id (see server.py).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

EMULATOR_DIR = Path(__file__).resolve().parent.parent
REGION = "us-east-1"


def _start_emulator(tmp: Path) -> tuple[subprocess.Popen, str]:
    ready = tmp / "emulator.ready"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kfaws_emulator", "--port", "0", "--ready-file", str(ready), "--exit-on-stdin-eof"],
        cwd=EMULATOR_DIR,
        stdin=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the emulator exited with status {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the emulator was not ready within 120 s")
        time.sleep(0.05)
    values = dict(line.split("=", 1) for line in ready.read_text().splitlines())
    return proc, values["KFAWS_EMULATOR_ENDPOINT"]


@pytest.fixture(scope="session")
def endpoint():
    if os.environ.get("KFAWS_EMULATOR_ENDPOINT"):
        yield os.environ["KFAWS_EMULATOR_ENDPOINT"]
        return
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _start_emulator(Path(tmp))
        try:
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Control:
    """A small client of the control API."""

    def __init__(self, endpoint: str) -> None:
        self.base = f"{endpoint}/_kfaws"

    def call(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.base}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")


@pytest.fixture(scope="session")
def control(endpoint):
    return Control(endpoint)


@pytest.fixture
def account_id():
    """A fresh account per test: nothing another test made is visible in it."""
    return "4" + "".join(secrets.choice("0123456789") for _ in range(11))


@pytest.fixture
def aws(endpoint, account_id):
    """``aws("eks")`` is a boto3 client for the emulator in this test's account, without retries."""
    session = boto3.session.Session(
        aws_access_key_id=account_id, aws_secret_access_key="test", region_name=REGION
    )
    config = Config(retries={"total_max_attempts": 1, "mode": "standard"})
    return lambda name, **kw: session.client(name, endpoint_url=endpoint, config=config, **kw)


@pytest.fixture
def lifecycle(control, account_id):
    """Sets lifecycle durations (seconds, unscaled) for this test's account only."""

    def set_durations(durations: dict[str, float]) -> None:
        status, body = control.call(
            "PUT", f"/lifecycle?account_id={account_id}", {"scale": 1.0, "durations": durations}
        )
        assert status == 200, body

    return set_durations


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):
    """Polls ``predicate`` until it returns a truthy value, which is returned; fails on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)
