"""SageMaker training jobs and endpoints run for real, locally (patches ``sagemaker_training_runner``,
``sagemaker_endpoint_runner``, ``efs_local_root``).

Most tests push a small test image whose program is a Python script standing in
for the trainer (``STAND_IN``): the code under test is the runner, and the script
reports what the SageMaker contract gave it (its host, the hosts, the rendezvous,
hyperparameters, channel files) and does what its ``mode`` hyperparameter says
(succeed, write the failure file, exit with a code, wait for SIGTERM; serve).
``test_real_trainer_trains_fashion_mnist_and_serves_it`` runs the real
``kfaws-trainer`` binary instead, on a Fashion-MNIST subset.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import warnings
import zlib
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from conftest import EMULATOR_DIR, Control, wait_for

needs_registry = pytest.mark.skipif(
    shutil.which("docker-registry") is None or shutil.which("htpasswd") is None,
    reason="Debian packages docker-registry and apache2-utils (make deps) are not installed",
)
pytestmark = needs_registry

ROLE = "arn:aws:iam::123456789012:role/kfaws-sagemaker"
TRAINER = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/kfaws/target")) / "debug" / "kfaws-trainer"
FASHION = Path("/usr/share/datasets/fashion-mnist")
REAL_TRAINER_MISSING = (
    f"LOUD SKIP: test_real_trainer_trains_fashion_mnist_and_serves_it did NOT run: it needs {TRAINER} "
    f"(cargo build --workspace --bins) and {FASHION} (Debian dataset-fashion-mnist)"
)
if not TRAINER.is_file() or not FASHION.is_dir():
    # shown in pytest's warnings summary even without -rs
    warnings.warn(REAL_TRAINER_MISSING, stacklevel=1)

STAND_IN = r'''#!/usr/bin/env python3
"""Stands in for kfaws-trainer: `train` reports the SageMaker contract it got, `serve` echoes."""
import http.server, json, os, pathlib, signal, socket, sys, time

def train():
    root = pathlib.Path(os.environ["TRAINER_SAGEMAKER_ROOT"])
    config = root / "input" / "config"
    resource = json.loads((config / "resourceconfig.json").read_text())
    hp = json.loads((config / "hyperparameters.json").read_text())
    hosts = sorted(resource["hosts"])
    data = root / "input" / "data"
    channels = {}
    for channel in sorted(data.iterdir()) if data.is_dir() else []:
        channels[channel.name] = {
            str(p.relative_to(channel)): p.read_text() for p in sorted(channel.rglob("*")) if p.is_file()
        }
    report = {
        "host": resource["current_host"],
        "rank": hosts.index(resource["current_host"]),
        "hosts": resource["hosts"],
        "master": f'{os.environ["TRAINER_MASTER_ADDR"]}:{os.environ["TRAINER_MASTER_PORT"]}',
        "hyperparameters": hp,
        "inputdataconfig": json.loads((config / "inputdataconfig.json").read_text()),
        "channels": channels,
        "env": {k: os.environ.get(k) for k in ("TRAINING_JOB_NAME", "GREETING")},
        "threads": os.environ.get("TRAINER_THREADS"),
        "checkpoints": {p.name: p.read_text() for p in sorted((root / "checkpoints").iterdir())},
        "cwd": os.getcwd(),
    }
    print(json.dumps(report), flush=True)
    print(f"progress loss=0.{report['rank'] + 2}5 accuracy=0.875", flush=True)
    mode = hp.get("mode", "ok")
    model = root / "model"
    if mode == "fail-file":
        (root / "output" / "failure").write_text("ValueError: the data is bad on " + resource["current_host"])
        sys.exit(1)
    master = (os.environ["TRAINER_MASTER_ADDR"], int(os.environ["TRAINER_MASTER_PORT"]))
    if mode == "exit" and report["rank"] == 1:
        # rendezvous first: rank 0 listens once its SIGTERM handler is in place
        for _ in range(600):
            try:
                socket.create_connection(master, timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        print("failing without a failure file", flush=True)
        sys.exit(int(hp["exit-code"]))
    if mode in ("wait", "exit"):
        def stop(*_):
            (model / f'stopped-{resource["current_host"]}.txt').write_text("SIGTERM")
            print("SIGTERM received, model saved", flush=True)
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        if mode == "exit":
            listener = socket.create_server(master)
            listener.accept()
        (root / "output" / "data").mkdir(parents=True, exist_ok=True)
        print("waiting for SIGTERM", flush=True)
        while True:
            time.sleep(0.05)
    (model / f'{resource["current_host"]}.json').write_text(json.dumps(report))
    (root / "output" / "data" / "summary.txt").write_text("done")
    (root / "checkpoints" / f'ckpt-{resource["current_host"]}').write_text("epoch 1")

class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        print("request", self.command, self.path, flush=True)
    def answer(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.answer(200 if self.path == "/ping" else 404, b"{}")
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Type") == "application/x-unsupported":
            self.answer(415, b"unsupported content type", "text/plain")
            return
        model = pathlib.Path(os.environ["TRAINER_MODEL_DIR"])
        self.answer(200, json.dumps({
            "content_type": self.headers.get("Content-Type"),
            "accept": self.headers.get("Accept"),
            "body": body.decode(),
            "model_files": sorted(str(p.relative_to(model)) for p in model.rglob("*") if p.is_file()),
            "greeting": os.environ.get("GREETING"),
        }).encode(), "application/vnd.test+json")

def serve():
    model = pathlib.Path(os.environ["TRAINER_MODEL_DIR"])
    if (model / "broken").exists():
        print("the model is broken", flush=True)
        sys.exit(3)
    server = http.server.HTTPServer((os.environ["TRAINER_SERVE_BIND_ADDR"], int(os.environ["TRAINER_SERVE_PORT"])), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("serving", flush=True)
    server.serve_forever()

{"train": train, "serve": serve}[sys.argv[1]]()
'''


# --- a minimal registry client: push one-layer images the way `kfaws image push` does ---------


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _http(url: str, method: str, auth: str, data: bytes | None = None, headers=None):
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.status, response.headers, response.read()


def push_image(aws, name: str, files: dict[str, tuple[bytes, int]]) -> str:
    """Pushes an image of one layer (``path -> (content, mode)``, entrypoint ``kfaws-trainer``) to the
    emulated ECR; answers ``repositoryUri@sha256:...``."""
    token = aws("ecr").get_authorization_token()["authorizationData"][0]
    auth = base64.b64decode(token["authorizationToken"]).decode()
    base = token["proxyEndpoint"]
    uri = aws("ecr").create_repository(repositoryName=name)["repository"]["repositoryUri"]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, (content, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(content), mode, 0
            tar.addfile(info, io.BytesIO(content))
    layer = gzip.compress(raw.getvalue(), compresslevel=1, mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["kfaws-trainer"], "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=from-image"]},
            "rootfs": {"type": "layers", "diff_ids": [_digest(raw.getvalue())]},
        }
    ).encode()
    for blob in (layer, config):
        _, headers, _ = _http(f"{base}/v2/{name}/blobs/uploads/", "POST", auth, b"")
        location = headers["Location"]
        location = location if location.startswith("http") else base + location
        separator = "&" if "?" in location else "?"
        _http(f"{location}{separator}digest={_digest(blob)}", "PUT", auth, blob, {"Content-Type": "application/octet-stream"})
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config), "digest": _digest(config)},
            "layers": [
                {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": len(layer), "digest": _digest(layer)}
            ],
        }
    ).encode()
    _http(
        f"{base}/v2/{name}/manifests/v1",
        "PUT",
        auth,
        manifest,
        {"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    return f"{uri}@{_digest(manifest)}"


@pytest.fixture
def stand_in_image(aws):
    return push_image(aws, "stand-in", {"usr/local/bin/kfaws-trainer": (STAND_IN.encode(), 0o755)})


@pytest.fixture
def bucket(aws, account_id):
    name = f"kfaws-sm-{account_id}"
    aws("s3").create_bucket(Bucket=name)
    return name


def _job(aws, name, image, bucket, hyperparameters=None, instances=1, channels=None, **extra):
    if channels:
        extra["InputDataConfig"] = channels
    aws("sagemaker").create_training_job(
        TrainingJobName=name,
        AlgorithmSpecification={
            "TrainingImage": image,
            "TrainingInputMode": "File",
            "MetricDefinitions": [{"Name": "train:loss", "Regex": r"loss=([0-9.]+)"}],
        },
        RoleArn=ROLE,
        HyperParameters=hyperparameters or {},
        OutputDataConfig={"S3OutputPath": f"s3://{bucket}/output"},
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": instances, "VolumeSizeInGB": 1},
        **{"StoppingCondition": {"MaxRuntimeInSeconds": 3600}, **extra},
    )


def _s3_channel(name, uri, distribution="FullyReplicated"):
    return {
        "ChannelName": name,
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": distribution}},
    }


def _wait_job(aws, name, statuses=("Completed", "Failed", "Stopped"), timeout=120):
    def done():
        job = aws("sagemaker").describe_training_job(TrainingJobName=name)
        return job if job["TrainingJobStatus"] in statuses else None

    return wait_for(done, timeout=timeout, interval=0.1)


def _model_files(aws, uri: str) -> dict[str, bytes]:
    bucket, key = uri[len("s3://") :].split("/", 1)
    body = aws("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _reports(job_log_lines):
    return [json.loads(line) for line in job_log_lines if line.startswith("{")]


def _log_lines(aws, name):
    logs = aws("logs")
    try:
        streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix=f"{name}/")
    except logs.exceptions.ResourceNotFoundException:
        return {}
    out = {}
    for stream in streams["logStreams"]:
        events = logs.get_log_events(
            logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream["logStreamName"], startFromHead=True
        )["events"]
        out[stream["logStreamName"]] = [e["message"] for e in events]
    return out


def test_a_job_runs_the_image_with_the_sagemaker_layout_and_uploads_its_model(aws, stand_in_image, bucket):
    s3 = aws("s3")
    s3.put_object(Bucket=bucket, Key="data/train/a.txt", Body=b"alpha")
    s3.put_object(Bucket=bucket, Key="data/train/sub/b.txt", Body=b"beta")
    s3.put_object(Bucket=bucket, Key="data/other/c.txt", Body=b"not in the channel")
    s3.put_object(Bucket=bucket, Key="ckpt/ok-job/old-ckpt", Body=b"epoch 0")
    hyperparameters = {"epochs": "3", "lr": "0.5", "note": '{"json": "stays a string"}'}
    _job(
        aws,
        "ok-job",
        stand_in_image,
        bucket,
        hyperparameters,
        channels=[_s3_channel("training", f"s3://{bucket}/data/train")],
        Environment={"GREETING": "from-the-job", "TRAINER_THREADS": "3"},
        CheckpointConfig={"S3Uri": f"s3://{bucket}/ckpt/ok-job"},
    )
    first = aws("sagemaker").describe_training_job(TrainingJobName="ok-job")
    assert first["TrainingJobStatus"] in ("InProgress", "Completed")

    job = _wait_job(aws, "ok-job")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert [t["Status"] for t in job["SecondaryStatusTransitions"]] == [
        "Starting",
        "Downloading",
        "Training",
        "Uploading",
        "Completed",
    ]
    artifacts = job["ModelArtifacts"]["S3ModelArtifacts"]
    assert artifacts == f"s3://{bucket}/output/ok-job/output/model.tar.gz"
    files = _model_files(aws, artifacts)
    assert set(files) == {"algo-1.json"}
    report = json.loads(files["algo-1.json"])
    assert report["host"] == "algo-1" and report["hosts"] == ["algo-1"] and report["rank"] == 0
    assert report["master"].startswith("127.0.0.1:")
    assert report["hyperparameters"] == hyperparameters
    assert report["channels"] == {"training": {"a.txt": "alpha", "sub/b.txt": "beta"}}
    assert report["inputdataconfig"]["training"]["TrainingInputMode"] == "File"
    assert report["env"] == {"TRAINING_JOB_NAME": "ok-job", "GREETING": "from-the-job"}
    assert report["threads"] == "3", "the job's Environment reaches the trainer"
    # checkpoints restored from CheckpointConfig.S3Uri at the start, synced back at the end
    assert report["checkpoints"] == {"old-ckpt": "epoch 0"}
    synced = s3.list_objects_v2(Bucket=bucket, Prefix="ckpt/ok-job/")["Contents"]
    assert sorted(o["Key"] for o in synced) == ["ckpt/ok-job/ckpt-algo-1", "ckpt/ok-job/old-ckpt"]
    # output/data became output.tar.gz next to the model
    output = _model_files(aws, artifacts.replace("model.tar.gz", "output.tar.gz"))
    assert output == {"summary.txt": b"done"}
    assert [(m["MetricName"], m["Value"]) for m in job["FinalMetricDataList"]] == [("train:loss", 0.25)]

    logs = _log_lines(aws, "ok-job")
    assert len(logs) == 1
    (stream, lines), = logs.items()
    assert stream.startswith("ok-job/algo-1-") and stream.split("-")[-1].isdigit()
    assert _reports(lines) == [report]


def test_two_instances_get_distinct_hosts_and_ranks_and_one_rendezvous(aws, stand_in_image, bucket):
    s3 = aws("s3")
    for i in range(4):
        s3.put_object(Bucket=bucket, Key=f"shards/part-{i}", Body=f"shard {i}".encode())
    s3.put_object(Bucket=bucket, Key="shared/config", Body=b"same for all")
    _job(
        aws,
        "two-hosts",
        stand_in_image,
        bucket,
        instances=2,
        channels=[
            _s3_channel("train", f"s3://{bucket}/shards/", "ShardedByS3Key"),
            _s3_channel("config", f"s3://{bucket}/shared"),
        ],
    )
    job = _wait_job(aws, "two-hosts")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    files = _model_files(aws, job["ModelArtifacts"]["S3ModelArtifacts"])
    reports = {name: json.loads(body) for name, body in files.items()}
    assert set(reports) == {"algo-1.json", "algo-2.json"}
    one, two = reports["algo-1.json"], reports["algo-2.json"]
    assert (one["host"], one["rank"], two["host"], two["rank"]) == ("algo-1", 0, "algo-2", 1)
    assert one["hosts"] == two["hosts"] == ["algo-1", "algo-2"]
    assert one["master"] == two["master"]
    assert one["cwd"] != two["cwd"]
    # the two instances share this machine's CPUs (the emulator runs with this process's)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert one["threads"] == two["threads"] == str(max(1, cpus // 2))
    shards_one, shards_two = set(one["channels"]["train"]), set(two["channels"]["train"])
    assert shards_one and shards_two and not shards_one & shards_two
    assert shards_one | shards_two == {f"part-{i}" for i in range(4)}
    assert one["channels"]["config"] == two["channels"]["config"] == {"config": "same for all"}
    streams = _log_lines(aws, "two-hosts")
    assert sorted(s.rsplit("-", 1)[0] for s in streams) == ["two-hosts/algo-1", "two-hosts/algo-2"]


def test_the_failure_file_is_the_failure_reason(aws, stand_in_image, bucket):
    _job(aws, "fails", stand_in_image, bucket, {"mode": "fail-file"})
    job = _wait_job(aws, "fails")
    assert job["TrainingJobStatus"] == "Failed"
    assert job["FailureReason"] == "ValueError: the data is bad on algo-1"
    assert job["SecondaryStatus"] == "Failed"
    assert "ModelArtifacts" not in job


def test_an_exit_code_without_failure_file_fails_the_job_and_stops_the_other_instance(aws, stand_in_image, bucket):
    _job(aws, "exits", stand_in_image, bucket, {"mode": "exit", "exit-code": "3"}, instances=2)
    job = _wait_job(aws, "exits")
    assert job["TrainingJobStatus"] == "Failed"
    assert job["FailureReason"] == "AlgorithmError: algo-2 exited with exit code 3"
    lines = [line for stream, lines in _log_lines(aws, "exits").items() if "/algo-1-" in stream for line in lines]
    assert "SIGTERM received, model saved" in lines


def test_stop_training_job_sends_sigterm_and_ends_stopped(aws, stand_in_image, bucket):
    _job(aws, "stopped", stand_in_image, bucket, {"mode": "wait"})
    sm = aws("sagemaker")
    wait_for(
        lambda: any("waiting for SIGTERM" in lines for lines in _log_lines(aws, "stopped").values()),
        timeout=60,
        interval=0.1,
    )
    sm.stop_training_job(TrainingJobName="stopped")
    assert sm.describe_training_job(TrainingJobName="stopped")["TrainingJobStatus"] in ("Stopping", "Stopped")
    job = _wait_job(aws, "stopped", statuses=("Stopped", "Failed", "Completed"))
    assert job["TrainingJobStatus"] == "Stopped"
    statuses = [t["Status"] for t in job["SecondaryStatusTransitions"]]
    assert statuses[-2:] == ["Stopping", "Stopped"]
    # the model saved on SIGTERM is uploaded, as SageMaker does
    assert set(_model_files(aws, job["ModelArtifacts"]["S3ModelArtifacts"])) == {"stopped-algo-1.txt"}
    with pytest.raises(ClientError) as err:
        sm.stop_training_job(TrainingJobName="stopped")
    assert err.value.response["Error"]["Code"] == "ValidationException"


def test_max_runtime_stops_the_job(aws, stand_in_image, bucket):
    _job(aws, "too-long", stand_in_image, bucket, {"mode": "wait"}, StoppingCondition={"MaxRuntimeInSeconds": 1})
    job = _wait_job(aws, "too-long", timeout=60)
    assert (job["TrainingJobStatus"], job["SecondaryStatus"]) == ("Stopped", "MaxRuntimeExceeded")
    assert set(_model_files(aws, job["ModelArtifacts"]["S3ModelArtifacts"])) == {"stopped-algo-1.txt"}


def test_an_image_named_by_tag_runs_too_and_an_unknown_one_fails_the_job(aws, stand_in_image, bucket):
    by_tag = stand_in_image.split("@")[0] + ":v1"
    _job(aws, "by-tag", by_tag, bucket)
    _job(aws, "no-image", stand_in_image.split("@")[0] + ":v2", bucket)
    assert _wait_job(aws, "by-tag")["TrainingJobStatus"] == "Completed"
    job = _wait_job(aws, "no-image")
    assert job["TrainingJobStatus"] == "Failed"
    assert job["FailureReason"].startswith("ClientError: cannot find the image")
    with pytest.raises(ClientError) as err:
        aws("sagemaker").stop_training_job(TrainingJobName="never-created")
    assert err.value.response["Error"]["Code"] == "ResourceNotFound"


def test_a_job_name_is_used_once(aws, stand_in_image, bucket):
    _job(aws, "once", stand_in_image, bucket)
    with pytest.raises(ClientError) as err:
        _job(aws, "once", stand_in_image, bucket)
    assert err.value.response["Error"]["Code"] == "ResourceInUse"
    _wait_job(aws, "once")


def test_missing_channel_data_fails_the_job_with_a_client_error(aws, stand_in_image, bucket):
    _job(aws, "no-data", stand_in_image, bucket, channels=[_s3_channel("training", f"s3://{bucket}/nothing/here")])
    job = _wait_job(aws, "no-data")
    assert job["TrainingJobStatus"] == "Failed"
    assert job["FailureReason"].startswith("ClientError: channel training: no S3 objects under")


def test_an_efs_channel_is_the_file_systems_local_directory(aws, control, stand_in_image, bucket):
    efs = aws("efs")
    fs_id = efs.create_file_system(CreationToken="sm-data")["FileSystemId"]
    status, body = control.call("GET", "/efs/local-root")
    assert status == 200
    fs_root = Path(body["root"]) / fs_id
    assert fs_root.is_dir() and not any(fs_root.iterdir())
    (fs_root / "datasets" / "fashion").mkdir(parents=True)
    (fs_root / "datasets" / "fashion" / "x.txt").write_text("from efs")
    _job(
        aws,
        "efs-job",
        stand_in_image,
        bucket,
        channels=[
            {
                "ChannelName": "training",
                "DataSource": {
                    "FileSystemDataSource": {
                        "FileSystemId": fs_id,
                        "FileSystemAccessMode": "ro",
                        "FileSystemType": "EFS",
                        "DirectoryPath": "/datasets/fashion",
                    }
                },
            }
        ],
        VpcConfig={"SecurityGroupIds": ["sg-12345678"], "Subnets": ["subnet-12345678"]},
    )
    job = _wait_job(aws, "efs-job")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    report = json.loads(_model_files(aws, job["ModelArtifacts"]["S3ModelArtifacts"])["algo-1.json"])
    assert report["channels"] == {"training": {"x.txt": "from efs"}}
    efs.delete_file_system(FileSystemId=fs_id)
    assert not fs_root.exists()


def _deploy(aws, name, image, model_url, environment=None):
    sm = aws("sagemaker")
    container = {"Image": image, "ModelDataUrl": model_url}
    if environment:
        container["Environment"] = environment
    sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer=container)
    sm.create_endpoint_config(
        EndpointConfigName=name,
        ProductionVariants=[
            {"VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.m5.large", "InitialInstanceCount": 1}
        ],
    )
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    assert sm.describe_endpoint(EndpointName=name)["EndpointStatus"] in ("Creating", "InService", "Failed")

    def settled():
        endpoint = sm.describe_endpoint(EndpointName=name)
        return endpoint if endpoint["EndpointStatus"] != "Creating" else None

    return wait_for(settled, timeout=180, interval=0.1)


def _model_tarball(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for path, content in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return raw.getvalue()


def test_an_endpoint_serves_the_model_and_passes_answers_and_errors_back(aws, control, stand_in_image, bucket):
    aws("s3").put_object(Bucket=bucket, Key="models/m.tar.gz", Body=_model_tarball({"model.bin": b"w", "sub/x.json": b"{}"}))
    endpoint = _deploy(aws, "ep", stand_in_image, f"s3://{bucket}/models/m.tar.gz", {"GREETING": "from-the-model"})
    assert endpoint["EndpointStatus"] == "InService", endpoint.get("FailureReason")
    runtime = aws("sagemaker-runtime")
    answer = runtime.invoke_endpoint(EndpointName="ep", Body=b'{"x": 1}', ContentType="application/json", Accept="application/json")
    assert answer["ContentType"] == "application/vnd.test+json"
    assert answer["InvokedProductionVariant"] == "AllTraffic"
    echoed = json.loads(answer["Body"].read())
    assert echoed == {
        "content_type": "application/json",
        "accept": "application/json",
        "body": '{"x": 1}',
        "model_files": ["model.bin", "sub/x.json"],
        "greeting": "from-the-model",
    }
    with pytest.raises(ClientError) as err:
        runtime.invoke_endpoint(EndpointName="ep", Body=b"x", ContentType="application/x-unsupported")
    error = err.value.response
    assert error["Error"]["Code"] == "ModelError"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert error["OriginalStatusCode"] == 415 and error["OriginalMessage"] == "unsupported content type"
    assert "/aws/sagemaker/Endpoints/ep" in error["LogStreamArn"]

    logs = aws("logs")
    (stream,) = logs.describe_log_streams(logGroupName="/aws/sagemaker/Endpoints/ep")["logStreams"]
    assert stream["logStreamName"].startswith("AllTraffic/i-")

    _, before = control.call("GET", "/sagemaker/local")
    aws("sagemaker").delete_endpoint(EndpointName="ep")
    with pytest.raises(ClientError) as err:
        runtime.invoke_endpoint(EndpointName="ep", Body=b"x", ContentType="application/json")
    assert err.value.response["Error"]["Code"] == "ValidationError"
    serving = set(before["running_pids"])
    assert serving
    wait_for(lambda: not serving & set(control.call("GET", "/sagemaker/local")[1]["running_pids"]), timeout=60)


def test_an_endpoint_whose_container_exits_fails(aws, stand_in_image, bucket):
    aws("s3").put_object(Bucket=bucket, Key="models/broken.tar.gz", Body=_model_tarball({"broken": b""}))
    endpoint = _deploy(aws, "ep-broken", stand_in_image, f"s3://{bucket}/models/broken.tar.gz")
    assert endpoint["EndpointStatus"] == "Failed"
    assert endpoint["FailureReason"].startswith(
        "The primary container for production variant AllTraffic did not pass the ping health check."
    )
    assert "exit code 3" in endpoint["FailureReason"]


def _gone(pids) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        # a zombie is gone too: only its (dead or busy) parent has not reaped it yet
        if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
            continue
        return False
    return True


def test_reset_and_emulator_shutdown_leave_no_process_behind(tmp_path):
    import boto3

    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kfaws_emulator", "--no-warmup", "--ready-file", str(ready)],
        cwd=EMULATOR_DIR,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "KFAWS_EMULATOR_WORK_DIR": str(tmp_path / "work")},
    )
    try:
        wait_for(ready.exists, timeout=60)
        endpoint = dict(line.split("=", 1) for line in ready.read_text().splitlines())["KFAWS_EMULATOR_ENDPOINT"]
        session = boto3.session.Session(aws_access_key_id="400000000777", aws_secret_access_key="test", region_name="us-east-1")
        aws = lambda name: session.client(name, endpoint_url=endpoint)  # noqa: E731
        control = Control(endpoint)

        def start_waiting_job(name):
            image = push_image(aws, f"stand-in-{name}", {"usr/local/bin/kfaws-trainer": (STAND_IN.encode(), 0o755)})
            aws("s3").create_bucket(Bucket=f"out-{name}")
            _job(aws, name, image, f"out-{name}", {"mode": "wait"}, instances=2)

            def two_running():
                pids = control.call("GET", "/sagemaker/local")[1]["running_pids"]
                return pids if len(pids) == 2 else None

            pids = wait_for(two_running, timeout=60)
            for pid in pids:
                os.kill(pid, 0)  # alive
            assert str(tmp_path / "work") == control.call("GET", "/sagemaker/local")[1]["work_dir"]
            return pids

        before_reset = start_waiting_job("first")
        assert control.call("POST", "/reset")[0] == 200
        wait_for(lambda: _gone(before_reset), timeout=30)
        pids = start_waiting_job("second")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    wait_for(lambda: _gone(pids), timeout=30)


# --- the real trainer -------------------------------------------------------------------------


def _png(gray: bytes, width: int, height: int) -> bytes:
    """A grayscale 8-bit PNG of ``gray`` (row-major pixels)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + gray[y * width : (y + 1) * width] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _idx_subset(path: Path, count: int) -> bytes:
    """The first ``count`` records of a gzipped IDX file, gzipped again (header adjusted)."""
    data = gzip.decompress(path.read_bytes())
    dims = data[3]
    shape = list(struct.unpack(f">{dims}I", data[4 : 4 + 4 * dims]))
    record = 1
    for d in shape[1:]:
        record *= d
    shape[0] = count
    header = data[:4] + struct.pack(f">{dims}I", *shape)
    return gzip.compress(header + data[4 + 4 * dims : 4 + 4 * dims + count * record], mtime=0)


@pytest.mark.skipif(not TRAINER.is_file() or not FASHION.is_dir(), reason=REAL_TRAINER_MISSING)
def test_real_trainer_trains_fashion_mnist_and_serves_it(aws, bucket):
    image = push_image(aws, "kfaws-trainer", {"usr/local/bin/kfaws-trainer": (TRAINER.read_bytes(), 0o755)})
    s3 = aws("s3")
    for kind, count in (("train", 12000), ("t10k", 1000)):
        for part in ("images-idx3", "labels-idx1"):
            name = f"{kind}-{part}-ubyte.gz"
            s3.put_object(Bucket=bucket, Key=f"fashion/{name}", Body=_idx_subset(FASHION / name, count))
    _job(
        aws,
        "real-trainer",
        image,
        bucket,
        {"epochs": "2", "batch-size": "32", "dataset": "fashion-mnist", "log-interval": "50"},
        instances=2,
        channels=[_s3_channel("training", f"s3://{bucket}/fashion/")],
    )
    job = _wait_job(aws, "real-trainer", timeout=600)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    files = _model_files(aws, job["ModelArtifacts"]["S3ModelArtifacts"])
    assert {"model.bpk", "model.json"} <= set(files)
    lines = [line for lines in _log_lines(aws, "real-trainer").values() for line in lines]
    epoch_lines = [line for line in lines if line.startswith("epoch=2 ")]
    assert len(epoch_lines) == 1, lines[-20:]
    accuracy = float(epoch_lines[0].split("test_acc=")[1].split(";")[0])
    assert accuracy > 0.5, epoch_lines

    endpoint = _deploy(aws, "real-endpoint", image, job["ModelArtifacts"]["S3ModelArtifacts"])
    assert endpoint["EndpointStatus"] == "InService", endpoint.get("FailureReason")
    images = gzip.decompress((FASHION / "t10k-images-idx3-ubyte.gz").read_bytes())[16:]
    labels = gzip.decompress((FASHION / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:]
    runtime = aws("sagemaker-runtime")
    correct = 0
    for i in range(20):
        pixels = list(images[i * 784 : (i + 1) * 784])
        answer = runtime.invoke_endpoint(
            EndpointName="real-endpoint", Body=json.dumps({"instances": [pixels]}), ContentType="application/json"
        )
        body = json.loads(answer["Body"].read())
        assert len(body["score"][0]) == 10
        if i == 0:
            body_for_first_image = body
        correct += body["indices"][0] == labels[i]
    assert correct >= 10, correct
    # a binary body (a PNG) reaches the container byte for byte
    answer = runtime.invoke_endpoint(EndpointName="real-endpoint", Body=_png(images[:784], 28, 28), ContentType="image/png")
    assert json.loads(answer["Body"].read())["indices"] == [body_for_first_image["indices"][0]]
    with pytest.raises(ClientError) as err:
        runtime.invoke_endpoint(EndpointName="real-endpoint", Body=b"x", ContentType="text/csv")
    assert err.value.response["Error"]["Code"] == "ModelError"
    assert err.value.response["OriginalStatusCode"] == 415
    aws("sagemaker").delete_endpoint(EndpointName="real-endpoint")
