"""SageMaker training jobs run for real, as local processes, under SageMaker's container contract.

AWS (CreateTrainingJob, DescribeTrainingJob, StopTrainingJob:
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateTrainingJob.html,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeTrainingJob.html,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StopTrainingJob.html; the container
contract: https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-training-algo-running-container.html,
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-training-algo-output.html):

- the job is ``InProgress`` with secondary status ``Starting`` -> ``Downloading`` -> ``Training``
  -> ``Uploading`` -> ``Completed``; or ``Failed``; or ``Stopping`` -> ``Stopped``
  (StopTrainingJob, or ``MaxRuntimeExceeded`` after ``StoppingCondition.MaxRuntimeInSeconds``);
- each instance runs the image with the argument ``train`` and finds under ``/opt/ml``:
  ``input/config/resourceconfig.json`` (``current_host`` ``algo-<i>``, ``hosts``),
  ``hyperparameters.json`` (the job's string values as given), ``inputdataconfig.json``,
  ``input/data/<channel>/`` (S3 objects copied, ``ShardedByS3Key`` split across hosts; an EFS
  ``FileSystemDataSource`` mounted), and writes ``model/`` (archived to
  ``S3OutputPath/<job>/output/model.tar.gz``, ``ModelArtifacts.S3ModelArtifacts``),
  ``output/data/`` (``output.tar.gz``), ``output/failure`` (its first 1024 characters are the
  ``FailureReason``), ``checkpoints/`` (synced with ``CheckpointConfig.S3Uri``);
- a non-zero exit of any instance fails the job (the others are stopped);
- StopTrainingJob sends SIGTERM, and SIGKILL 120 s later; the model saved meanwhile is uploaded;
- logs go to CloudWatch Logs group ``/aws/sagemaker/TrainingJobs``, stream
  ``<job>/algo-<i>-<epoch seconds>``; ``FinalMetricDataList`` holds the last value each
  ``MetricDefinitions`` regex (first group) matched in the logs.

moto 5.2.5 answers ``Completed`` at once, runs nothing, replaces the job's
``MetricDefinitions`` with a made-up one, has no StopTrainingJob, and accepts a
repeated job name (AWS: ``ResourceInUse``).

Local-only: the image's program runs as a process on this machine (``_images``)
with ``TRAINER_SAGEMAKER_ROOT`` pointing at its own copy of the ``/opt/ml`` layout
(``<work dir>/training/<account>/<region>/<job>/algo-<i>/``);
``TRAINER_MASTER_ADDR=127.0.0.1`` and ``TRAINER_MASTER_PORT=<free port>`` because the
host names ``algo-<i>`` do not resolve here; with several instances, ``TRAINER_THREADS`` is this
machine's CPU count divided by the instance count (they share its CPUs) unless the image or the
job's ``Environment`` sets ``TRAINER_THREADS`` or ``RAYON_NUM_THREADS``; logs are also written to ``logs/algo-<i>.log`` next to those roots. Channels are always ``File`` mode; instance types mean nothing.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from moto.core.utils import utcnow
from moto.sagemaker.exceptions import ResourceInUseException, ResourceNotFound, ValidationError
from moto.sagemaker.models import FakeTrainingJob, SageMakerModelBackend
from moto.sagemaker.responses import SageMakerResponse
from moto.core.responses import EmptyResult

from . import _images, efs_local_root
from ._common import thread_state, wrap
from ._local import (
    LocalError,
    LogSink,
    forget,
    free_port,
    in_moto,
    install_reset_hook,
    on_reset,
    parse_s3_uri,
    pump_lines,
    s3_put,
    s3_snapshot,
    signal_group,
    spawn,
    work_dir,
)

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
STOP_GRACE_S = 120.0
FAILURE_REASON_MAX = 1024

MESSAGES = {
    "Starting": "Launching requested ML instances",
    "Downloading": "Downloading input data",
    "Training": "Training image download completed. Training in progress.",
    "Uploading": "Uploading generated training model",
    "Completed": "Training job completed",
    "Failed": "Training job failed",
    "Stopping": "Stopping the training job",
    "Stopped": "Training job stopped",
    "MaxRuntimeExceeded": "Training job exceeded MaxRuntimeInSeconds provided",
}

_runs: dict[tuple[str, str, str], "TrainingRun"] = {}
_runs_lock = threading.Lock()


def _transition(job: FakeTrainingJob, status: str, final: bool = False) -> None:
    now = utcnow()
    transitions = job.secondary_status_transitions
    if transitions and "EndTime" not in transitions[-1]:
        transitions[-1]["EndTime"] = now
    entry = {"Status": status, "StartTime": now, "StatusMessage": MESSAGES.get(status, status)}
    if final:
        entry["EndTime"] = now
    transitions.append(entry)
    job.secondary_status = status
    job.last_modified_time = now


class Channel:
    """One input channel, snapshotted under the moto lock at CreateTrainingJob."""

    def __init__(self, spec: dict, account_id: str) -> None:
        self.name = spec["ChannelName"]
        self.spec = spec
        source = spec.get("DataSource") or {}
        self.objects: list[tuple[str, Any]] = []
        self.efs_dir: Path | None = None
        self.sharded = False
        self.prefix = ""
        if "S3DataSource" in source:
            s3 = source["S3DataSource"]
            if s3.get("S3DataType", "S3Prefix") != "S3Prefix":
                raise LocalError(f"ClientError: channel {self.name}: only S3DataType S3Prefix is run locally")
            self.sharded = s3.get("S3DataDistributionType") == "ShardedByS3Key"
            _, self.prefix = parse_s3_uri(s3["S3Uri"])
            self.objects = s3_snapshot(account_id, s3["S3Uri"])
            if not self.objects:
                raise LocalError(f"ClientError: channel {self.name}: no S3 objects under {s3['S3Uri']}")
        elif "FileSystemDataSource" in source:
            fs = source["FileSystemDataSource"]
            directory = efs_local_root.fs_dir(fs["FileSystemId"]) / fs.get("DirectoryPath", "/").lstrip("/")
            if not directory.is_dir():
                raise LocalError(
                    f"ClientError: channel {self.name}: directory {fs.get('DirectoryPath')} not found "
                    f"in file system {fs['FileSystemId']}"
                )
            self.efs_dir = directory
        else:
            raise LocalError(f"ClientError: channel {self.name}: no S3DataSource or FileSystemDataSource")

    def relative(self, key: str) -> str:
        """Where object ``key`` lands inside the channel directory."""
        prefix = self.prefix
        if key == prefix:
            return key.rsplit("/", 1)[-1]
        if prefix.endswith("/") or key[len(prefix)] == "/":
            return key[len(prefix) :].lstrip("/")
        return key[len(prefix.rsplit("/", 1)[0]) + 1 if "/" in prefix else 0 :]

    def materialise(self, target: Path, host_index: int, host_count: int) -> None:
        """Fills ``target`` (``input/data/<channel>``) for host ``host_index`` of ``host_count``."""
        if self.efs_dir is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(self.efs_dir, target_is_directory=True)
            return
        target.mkdir(parents=True, exist_ok=True)
        objects = self.objects[host_index::host_count] if self.sharded else self.objects
        for key, fake_key in objects:
            relative = self.relative(key)
            if not relative or relative.endswith("/"):
                continue
            path = (target / relative).resolve()
            if not path.is_relative_to(target.resolve()):
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(fake_key.value)

    def input_config(self) -> dict:
        """This channel's entry of ``inputdataconfig.json``."""
        s3 = (self.spec.get("DataSource") or {}).get("S3DataSource") or {}
        entry = {"TrainingInputMode": self.spec.get("InputMode", "File"), "RecordWrapperType": self.spec.get("RecordWrapperType", "None")}
        if self.spec.get("ContentType"):
            entry["ContentType"] = self.spec["ContentType"]
        if s3:
            entry["S3DistributionType"] = s3.get("S3DataDistributionType", "FullyReplicated")
        return entry


class TrainingRun:
    """The local run of one training job: a thread that prepares, runs and finishes it."""

    def __init__(self, backend: SageMakerModelBackend, job: FakeTrainingJob, spec: dict, environment: dict) -> None:
        self.account_id, self.region = backend.account_id, backend.region_name
        self.job = job
        self.name = job.training_job_name
        self.spec = spec
        self.environment = {str(k): str(v) for k, v in (environment or {}).items()}
        self.instance_count = int((job.resource_config or {}).get("InstanceCount") or 1)
        self.dir = work_dir() / "training" / self.account_id / self.region / self.name
        self.stop_status: str | None = None
        self._stop_event = threading.Event()
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self.setup_error: LocalError | None = None
        self.channels: list[Channel] = []
        self.checkpoint_objects: list[tuple[str, Any]] = []
        self.metrics: dict[str, tuple[float, Any]] = {}
        try:
            self.channels = [Channel(c, self.account_id) for c in job.input_data_config or []]
            checkpoint_uri = (job.checkpoint_config or {}).get("S3Uri")
            if checkpoint_uri:
                try:
                    self.checkpoint_objects = s3_snapshot(self.account_id, checkpoint_uri)
                except LocalError:
                    self.checkpoint_objects = []
        except (LocalError, ValueError) as err:
            self.setup_error = LocalError(str(err))

    # -- called under the moto lock ------------------------------------------

    def request_stop(self, status: str) -> None:
        """Under the moto lock: StopTrainingJob (``Stopped``) or the runtime limit (``MaxRuntimeExceeded``)."""
        if self.signal_stop(status):
            self.job.training_job_status = "Stopping"
            _transition(self.job, "Stopping")

    def signal_stop(self, status: str) -> bool:
        """SIGTERM to every process now, SIGKILL to those left after 120 s; False if already stopping."""
        with self._lock:
            if self.stop_status is not None:
                return False
            self.stop_status = status
            procs = list(self._procs)
        self._stop_event.set()
        for proc in procs:
            signal_group(proc, signal.SIGTERM)

        def kill_later() -> None:
            deadline = time.monotonic() + STOP_GRACE_S
            for proc in procs:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    signal_group(proc, signal.SIGKILL)

        threading.Thread(target=kill_later, name=f"kfaws-stop-{self.name}", daemon=True).start()
        return True

    def kill(self) -> None:
        """Emulator reset: the job's processes die at once."""
        with self._lock:
            self.stop_status = self.stop_status or "Stopped"
            procs = list(self._procs)
        self._stop_event.set()
        for proc in procs:
            signal_group(proc, signal.SIGKILL)

    # -- the runner thread -----------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"kfaws-training-{self.name}", daemon=True).start()

    def _post(self, status: str, **attributes: Any) -> None:
        job = self.job

        def apply() -> None:
            if job.training_job_status != "InProgress":
                return
            for key, value in attributes.items():
                setattr(job, key, value)
            _transition(job, status)

        in_moto(apply)

    def _run(self) -> None:
        started = time.monotonic()
        try:
            if self.setup_error:
                raise self.setup_error
            image = _images.unpacked(self.spec["TrainingImage"])
            self._post("Downloading")
            hosts = [f"algo-{i}" for i in range(1, self.instance_count + 1)]
            roots = [self._prepare(i, hosts) for i in range(len(hosts))]
            if self._stop_event.is_set():
                self._finish(roots, [], started, training_started=None)
                return
            argv = image.program(self.spec.get("ContainerEntrypoint"), self.spec.get("ContainerArguments") or ["train"])
            training_started = time.monotonic()
            self._post("Training", training_start_time=utcnow())
            exits = self._train(image, argv, hosts, roots)
            self._finish(roots, exits, started, training_started)
        except LocalError as err:
            self._fail(str(err), started)
        except Exception as err:  # noqa: BLE001 - the job fails with the reason instead of hanging
            self._fail(f"InternalServerError: {type(err).__name__}: {err}", started)

    def _prepare(self, index: int, hosts: list[str]) -> Path:
        root = self.dir / hosts[index]
        shutil.rmtree(root, ignore_errors=True)
        config = root / "input" / "config"
        config.mkdir(parents=True)
        for sub in ("model", "output/data", "checkpoints", "code"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        instance_type = (self.job.resource_config or {}).get("InstanceType", "ml.m5.large")
        resource = {
            "current_host": hosts[index],
            "current_instance_type": instance_type,
            "current_group_name": "homogeneousCluster",
            "hosts": hosts,
            "instance_groups": [
                {"instance_group_name": "homogeneousCluster", "instance_type": instance_type, "hosts": hosts}
            ],
            "network_interface_name": "eth0",
        }
        (config / "resourceconfig.json").write_text(json.dumps(resource))
        (config / "hyperparameters.json").write_text(json.dumps(self.job.hyper_parameters or {}))
        (config / "inputdataconfig.json").write_text(json.dumps({c.name: c.input_config() for c in self.channels}))
        for channel in self.channels:
            channel.materialise(root / "input" / "data" / channel.name, index, len(hosts))
        for key, fake_key in self.checkpoint_objects:
            _, prefix = parse_s3_uri(self.job.checkpoint_config["S3Uri"])
            relative = key[len(prefix) :].lstrip("/")
            if relative and not relative.endswith("/"):
                path = root / "checkpoints" / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(fake_key.value)
        return root

    def _environment(self, image: _images.Image, root: Path, port: int) -> dict[str, str]:
        env = image.env()
        env["PATH"] = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update(self.environment)
        # On AWS each instance has its own CPUs; here the instances share this machine's, so each
        # gets its share (as torchrun's OMP_NUM_THREADS default) unless the image or the job's
        # Environment sets the thread count. One instance keeps the trainer's own default, which
        # also honours a cgroup CPU quota.
        if self.instance_count > 1 and not {"TRAINER_THREADS", "RAYON_NUM_THREADS"} & env.keys():
            env["TRAINER_THREADS"] = str(max(1, _cpu_count() // self.instance_count))
        env.update(
            {
                "TRAINING_JOB_NAME": self.name,
                "TRAINING_JOB_ARN": self.job.arn,
                "AWS_REGION": self.region,
                "TRAINER_SAGEMAKER_ROOT": str(root),
                "TRAINER_MASTER_ADDR": "127.0.0.1",
                "TRAINER_MASTER_PORT": str(port),
                "TRAINER_BIND_ADDR": "127.0.0.1",
            }
        )
        return env

    def _metric_sink(self):
        definitions = [
            (d["Name"], re.compile(d["Regex"]))
            for d in self.spec.get("MetricDefinitions") or []
            if d.get("Name") and d.get("Regex")
        ]

        def sink(line: str) -> None:
            for name, regex in definitions:
                match = regex.search(line)
                if match:
                    try:
                        value = float(match.group(1) if regex.groups else match.group(0))
                    except ValueError:
                        continue
                    self.metrics[name] = (value, utcnow())

        return sink

    def _train(self, image, argv, hosts, roots) -> list[tuple[str, int]]:
        port = free_port()
        epoch = int(time.time())
        sinks, pumps = [], []
        metric_sink = self._metric_sink()
        with self._lock:
            if self.stop_status is not None:
                return []
            for host, root in zip(hosts, roots):
                sink = LogSink(
                    self.account_id, self.region, LOG_GROUP, f"{self.name}/{host}-{epoch}", self.dir / "logs" / f"{host}.log"
                )
                try:
                    proc = spawn(
                        argv,
                        cwd=root,
                        env=self._environment(image, root, port),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                    )
                except OSError as err:
                    for started in self._procs:
                        signal_group(started, signal.SIGKILL)
                        forget(started)
                    sink.close()
                    raise LocalError(f"ClientError: cannot run {argv[0]} for {host}: {err}") from None
                self._procs.append(proc)
                sinks.append(sink)
                pumps.append(pump_lines(proc, [sink.write, metric_sink]))
        max_runtime = (self.job.stopping_condition or {}).get("MaxRuntimeInSeconds")
        deadline = time.monotonic() + float(max_runtime) if max_runtime else None
        exits: list[tuple[str, int]] = []
        pending = dict(zip(hosts, self._procs))
        while pending:
            for host, proc in list(pending.items()):
                code = proc.poll()
                if code is None:
                    continue
                del pending[host]
                forget(proc)
                exits.append((host, 128 - code if code < 0 else code))
                if code != 0 and self.stop_status is None:
                    # SageMaker fails the job when one instance fails: stop the others.
                    for other in pending.values():
                        signal_group(other, signal.SIGTERM)
            if deadline is not None and time.monotonic() > deadline:
                deadline = None
                if self.signal_stop("MaxRuntimeExceeded"):
                    job = self.job

                    def stopping() -> None:
                        if job.training_job_status == "InProgress":
                            job.training_job_status = "Stopping"
                            _transition(job, "Stopping")

                    in_moto(stopping)
            if pending:
                time.sleep(0.1)
        for pump in pumps:
            pump.join(timeout=10)
        for sink in sinks:
            sink.close()
        return exits

    def _finish(self, roots: list[Path], exits: list[tuple[str, int]], started: float, training_started) -> None:
        failed = [(host, code) for host, code in exits if code != 0]
        ended = time.monotonic()
        seconds = int(round(ended - (training_started or started)))
        if self.stop_status is None and failed:
            host, code = failed[0]
            failure = roots[int(host.split("-")[1]) - 1] / "output" / "failure"
            if failure.is_file() and failure.read_text(errors="replace").strip():
                reason = failure.read_text(errors="replace")[:FAILURE_REASON_MAX]
            else:
                reason = f"AlgorithmError: {host} exited with exit code {code}"
            self._sync_checkpoints(roots)
            self._fail(reason, started, seconds)
            return
        if self.stop_status is None:
            self._post("Uploading")
        model = _tar_dirs([r / "model" for r in roots])
        output = _tar_dirs([r / "output" / "data" for r in roots], skip_empty=True)
        job = self.job
        metrics = dict(self.metrics)
        output_path = (job.output_data_config or {}).get("S3OutputPath", "").rstrip("/")
        model_uri = f"{output_path}/{self.name}/output/model.tar.gz"
        stop_status = self.stop_status

        def complete() -> None:
            try:
                s3_put(self.account_id, model_uri, model)
                if output is not None:
                    s3_put(self.account_id, f"{output_path}/{self.name}/output/output.tar.gz", output)
            except LocalError as err:
                _apply_failure(job, str(err), seconds)
                return
            now = utcnow()
            job.model_artifacts = {"S3ModelArtifacts": model_uri}
            job.training_end_time = now
            job.training_time_in_seconds = seconds
            job.billable_time_in_seconds = seconds
            job.final_metric_data_list = [
                {"MetricName": name, "Value": value, "Timestamp": when} for name, (value, when) in sorted(metrics.items())
            ] or None
            final = "Stopped" if stop_status else "Completed"
            job.training_job_status = final
            _transition(job, "MaxRuntimeExceeded" if stop_status == "MaxRuntimeExceeded" else final, final=True)

        self._sync_checkpoints(roots)  # queued first: visible no later than the final status
        in_moto(complete)

    def _sync_checkpoints(self, roots: list[Path]) -> None:
        uri = (self.job.checkpoint_config or {}).get("S3Uri")
        if not uri:
            return
        files: dict[str, bytes] = {}
        for root in reversed(roots):  # algo-1's files win
            base = root / "checkpoints"
            for path in sorted(base.rglob("*")):
                if path.is_file():
                    files[path.relative_to(base).as_posix()] = path.read_bytes()
        prefix = uri.rstrip("/")

        def upload() -> None:
            for relative, body in files.items():
                try:
                    s3_put(self.account_id, f"{prefix}/{relative}", body)
                except LocalError:
                    return

        in_moto(upload)

    def _fail(self, reason: str, started: float, seconds: int | None = None) -> None:
        job = self.job
        seconds = int(round(time.monotonic() - started)) if seconds is None else seconds
        in_moto(lambda: _apply_failure(job, reason, seconds))


def _cpu_count() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _apply_failure(job: FakeTrainingJob, reason: str, seconds: int) -> None:
    job.failure_reason = reason[:FAILURE_REASON_MAX]
    job.training_job_status = "Failed"
    job.training_end_time = utcnow()
    job.training_time_in_seconds = seconds
    job.billable_time_in_seconds = seconds
    _transition(job, "Failed", final=True)


def _tar_dirs(dirs: list[Path], skip_empty: bool = False) -> bytes | None:
    """A ``tar.gz`` of the union of ``dirs`` (earlier directories win), members relative to each."""
    members: dict[str, Path] = {}
    for base in reversed(dirs):
        if base.is_dir():
            for path in sorted(base.rglob("*")):
                if path.is_file():
                    members[path.relative_to(base).as_posix()] = path
    if skip_empty and not members:
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in sorted(members):
            tar.add(members[name], arcname=name)
    return buffer.getvalue()


def run_for(account_id: str, region: str, name: str) -> TrainingRun | None:
    """The local run of a training job, if it has one."""
    with _runs_lock:
        return _runs.get((account_id, region, name))


def _reset() -> None:
    with _runs_lock:
        runs = list(_runs.values())
        _runs.clear()
    for run in runs:
        run.kill()


def apply() -> None:
    install_reset_hook()
    on_reset(_reset)

    def make_response_create(original):
        def create_training_job(self):
            # moto's backend method does not take Environment; hand it over.
            thread_state().sagemaker_environment = self._get_param("Environment") or {}
            try:
                return original(self)
            finally:
                thread_state().sagemaker_environment = {}

        return create_training_job

    def make_create(original):
        def create_training_job(self, training_job_name, *args, **kwargs):
            if training_job_name in self.training_jobs:
                raise ResourceInUseException(
                    message=f"Training job names must be unique within an AWS account and region, and a training job with this name already exists ({FakeTrainingJob.arn_formatter(training_job_name, self.account_id, self.region_name)})"
                )
            spec = copy.deepcopy(kwargs.get("algorithm_specification") if "algorithm_specification" in kwargs else args[1])
            job = original(self, training_job_name, *args, **kwargs)
            job.algorithm_specification = spec
            now = utcnow()
            job.training_job_status = "InProgress"
            job.secondary_status = "Starting"
            job.secondary_status_transitions = [
                {"Status": "Starting", "StartTime": now, "StatusMessage": MESSAGES["Starting"]}
            ]
            job.training_start_time = None
            job.training_end_time = None
            job.final_metric_data_list = None
            job.model_artifacts = None
            job.failure_reason = None
            job.training_time_in_seconds = None
            job.billable_time_in_seconds = None
            if not (spec or {}).get("TrainingImage"):
                _apply_failure(job, "ClientError: AlgorithmSpecification.TrainingImage is required to run locally", 0)
                return job
            run = TrainingRun(self, job, spec, getattr(thread_state(), "sagemaker_environment", {}))
            with _runs_lock:
                _runs[(self.account_id, self.region_name, training_job_name)] = run
            run.start()
            return job

        return create_training_job

    def stop_training_job_backend(self, training_job_name: str) -> None:
        job = self.training_jobs.get(training_job_name)
        if job is None:
            arn = FakeTrainingJob.arn_formatter(training_job_name, self.account_id, self.region_name)
            raise ResourceNotFound(message=f"Could not find training job '{arn}'.")
        if job.training_job_status != "InProgress":
            raise ValidationError(
                message=f"The training job {training_job_name} is in status {job.training_job_status} and cannot be stopped."
            )
        run = run_for(self.account_id, self.region_name, training_job_name)
        if run is not None:
            run.request_stop("Stopped")

    def stop_training_job_response(self):
        self.sagemaker_backend.stop_training_job(self._get_param("TrainingJobName"))
        return EmptyResult()

    wrap(SageMakerResponse, "create_training_job", make_response_create)
    wrap(SageMakerModelBackend, "create_training_job", make_create)
    SageMakerModelBackend.stop_training_job = stop_training_job_backend  # type: ignore[attr-defined]
    SageMakerResponse.stop_training_job = stop_training_job_response  # type: ignore[attr-defined]
