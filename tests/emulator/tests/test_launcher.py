"""The launcher: ready file, account isolation by access key, clean exit."""

import os
import signal
import subprocess
import sys
import time
import urllib.request

from conftest import EMULATOR_DIR


def _launch(tmp_path, *extra):
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kfaws_emulator", "--no-warmup", "--ready-file", str(ready), *extra],
        cwd=EMULATOR_DIR,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc, ready, dict(line.split("=", 1) for line in ready.read_text().splitlines())


def test_ready_file_names_a_live_endpoint_and_is_removed_on_sigterm(tmp_path):
    proc, ready, values = _launch(tmp_path)
    assert set(values) == {
        "KFAWS_EMULATOR_ENDPOINT",
        "KFAWS_EMULATOR_CONTROL",
        "KFAWS_EMULATOR_PID",
        "AWS_ENDPOINT_URL",
    }
    assert values["KFAWS_EMULATOR_PID"] == str(proc.pid)
    assert values["KFAWS_EMULATOR_ENDPOINT"].startswith("http://127.0.0.1:")
    with urllib.request.urlopen(values["KFAWS_EMULATOR_CONTROL"] + "/health") as response:
        assert response.status == 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert not ready.exists()


def test_exits_when_its_parent_closes_stdin(tmp_path):
    proc, ready, _ = _launch(tmp_path, "--exit-on-stdin-eof")
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0
    assert not ready.exists()


def test_refuses_a_non_loopback_host():
    result = subprocess.run(
        [sys.executable, "-m", "kfaws_emulator", "--host", "0.0.0.0"],
        cwd=EMULATOR_DIR,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert b"--host must be a loopback address" in result.stderr


def test_access_key_selects_the_account(aws, account_id, endpoint):
    assert aws("sts").get_caller_identity()["Account"] == account_id
    aws("s3").create_bucket(Bucket=f"kfaws-{account_id}")
    import boto3

    other = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="400000000003", aws_secret_access_key="x"
    )
    assert f"kfaws-{account_id}" not in [b["Name"] for b in other.list_buckets()["Buckets"]]


def test_x_moto_account_id_header_selects_the_account_too(aws, endpoint):
    import boto3

    sts = boto3.client(
        "sts", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="AKIAEXAMPLE", aws_secret_access_key="x"
    )
    sts.meta.events.register("before-sign.sts.*", lambda request, **_: request.headers.__setitem__("x-moto-account-id", "400000000004"))
    assert sts.get_caller_identity()["Account"] == "400000000004"


def test_the_default_account_is_moto_s(endpoint):
    import boto3

    sts = boto3.client(
        "sts", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="AKIAEXAMPLE", aws_secret_access_key="x"
    )
    assert sts.get_caller_identity()["Account"] == os.environ.get("MOTO_ACCOUNT_ID", "123456789012")
