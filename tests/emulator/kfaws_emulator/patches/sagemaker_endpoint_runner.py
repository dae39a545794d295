"""SageMaker real-time endpoints served for real, by the model's image running locally.

AWS (CreateEndpoint, DescribeEndpoint, DeleteEndpoint, InvokeEndpoint:
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateEndpoint.html,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DeleteEndpoint.html,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html; the
container contract: https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html):

- CreateEndpoint answers at once with the endpoint ``Creating``; SageMaker unpacks the
  model's ``ModelDataUrl`` (``model.tar.gz``) into ``/opt/ml/model``, runs the model's
  ``PrimaryContainer.Image`` with the argument ``serve``, and the endpoint is ``InService``
  once ``GET /ping`` answers 200, or ``Failed`` with a ``FailureReason`` ("The primary
  container for production variant V did not pass the ping health check") when it does not
  within ``ContainerStartupHealthCheckTimeoutInSeconds``, or the container exits;
- InvokeEndpoint sends the body to the container's ``POST /invocations`` with the request's
  ``Content-Type`` and ``Accept``, and answers the container's body and ``Content-Type``;
  a 4xx or 5xx from the container is ``ModelError`` (HTTP 424) with ``OriginalStatusCode``,
  ``OriginalMessage`` and ``LogStreamArn``; an endpoint that does not exist or is not
  ``InService`` is ``ValidationError``;
- the container's output goes to CloudWatch Logs group ``/aws/sagemaker/Endpoints/<name>``,
  stream ``<variant>/<instance id>``;
- DeleteEndpoint stops the container (SIGTERM, SIGKILL 30 s later).

moto 5.2.5 makes endpoints ``InService`` at once, runs nothing, answers every
InvokeEndpoint with a made-up body, and fails (500) on a body that is not UTF-8, such as
an image.

Local-only: one process for the endpoint's first production variant (instance counts and
further variants are not run); the model directory and port reach the program through
``TRAINER_MODEL_DIR`` / ``TRAINER_SERVE_PORT`` / ``TRAINER_SERVE_BIND_ADDR`` (the
kfaws trainer's flags; ``SAGEMAKER_BIND_TO_PORT`` too) instead of ``/opt/ml/model`` and
port 8080; the endpoint's files are under ``<work dir>/endpoints/<account>/<region>/<name>/``.
InvokeEndpoint is answered under the emulator's moto lock, so invocations are served one at
a time (60 s limit each, as SageMaker's).
"""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import signal
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from moto.core.utils import utcnow
from moto.sagemaker.exceptions import ValidationError
from moto.sagemaker.models import FakeEndpoint, SageMakerModelBackend, sagemaker_backends
from moto.sagemakerruntime.responses import SageMakerRuntimeResponse

from . import _images
from ._common import wrap
from ._local import (
    LocalError,
    LogSink,
    free_port,
    in_moto,
    install_reset_hook,
    on_reset,
    parse_s3_uri,
    pump_lines,
    s3_backend,
    signal_group,
    spawn,
    terminate,
    work_dir,
)

DEFAULT_HEALTH_TIMEOUT_S = 600.0
INVOCATION_TIMEOUT_S = 60.0

_runs: dict[tuple[str, str, str], "EndpointRun"] = {}
_runs_lock = threading.Lock()


class EndpointRun:
    """The local container of one endpoint: a thread starts it and waits for ``/ping``."""

    def __init__(self, backend: SageMakerModelBackend, endpoint: FakeEndpoint, variant: dict, container: dict) -> None:
        self.account_id, self.region = backend.account_id, backend.region_name
        self.endpoint = endpoint
        self.name = endpoint.endpoint_name
        self.variant = variant.get("VariantName", "AllTraffic")
        self.health_timeout = float(variant.get("ContainerStartupHealthCheckTimeoutInSeconds") or DEFAULT_HEALTH_TIMEOUT_S)
        self.container = container
        self.dir = work_dir() / "endpoints" / self.account_id / self.region / self.name
        self.stream = f"{self.variant}/i-{secrets.token_hex(8)}"
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.deleted = threading.Event()
        self._lock = threading.Lock()
        self.model_key = None
        self.setup_error: LocalError | None = None
        try:
            if not container.get("Image"):
                raise LocalError("ClientError: the model has no PrimaryContainer.Image")
            if container.get("ModelDataUrl"):
                bucket, key = parse_s3_uri(container["ModelDataUrl"])
                try:
                    self.model_key = s3_backend(self.account_id).get_object(bucket, key)
                except Exception:  # noqa: BLE001 - MissingBucket or MissingKey alike
                    self.model_key = None
                if self.model_key is None:
                    raise LocalError(f"ClientError: cannot read the model data {container['ModelDataUrl']}")
        except LocalError as err:
            self.setup_error = err

    @property
    def log_stream_arn(self) -> str:
        return f"arn:aws:logs:{self.region}:{self.account_id}:log-group:/aws/sagemaker/Endpoints/{self.name}:log-stream:{self.stream}"

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"kfaws-endpoint-{self.name}", daemon=True).start()

    def _run(self) -> None:
        try:
            if self.setup_error:
                raise self.setup_error
            image = _images.unpacked(self.container["Image"])
            model_dir = self.dir / "model"
            shutil.rmtree(self.dir, ignore_errors=True)
            model_dir.mkdir(parents=True)
            if self.model_key is not None:
                try:
                    with tarfile.open(fileobj=io.BytesIO(self.model_key.value), mode="r:*") as tar:
                        tar.extractall(model_dir, filter="data")
                except (tarfile.TarError, OSError) as err:
                    raise LocalError(f"ClientError: cannot unpack {self.container['ModelDataUrl']}: {err}") from None
            argv = image.program(None, ["serve"])
            self.port = free_port()
            env = image.env()
            env["PATH"] = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
            env.update({str(k): str(v) for k, v in (self.container.get("Environment") or {}).items()})
            env.update(
                {
                    "TRAINER_MODEL_DIR": str(model_dir),
                    "TRAINER_SERVE_PORT": str(self.port),
                    "TRAINER_SERVE_BIND_ADDR": "127.0.0.1",
                    "SAGEMAKER_BIND_TO_PORT": str(self.port),
                    "AWS_REGION": self.region,
                }
            )
            sink = LogSink(
                self.account_id,
                self.region,
                f"/aws/sagemaker/Endpoints/{self.name}",
                self.stream,
                self.dir / "logs" / "container.log",
            )
            with self._lock:
                if self.deleted.is_set():
                    return
                self.proc = spawn(
                    argv,
                    cwd=self.dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            pump_lines(self.proc, [sink.write], on_eof=sink.close)
            self._wait_healthy()
            self._set(lambda e: setattr(e, "endpoint_status", "InService"))
        except LocalError as err:
            self._failed(str(err))
        except Exception as err:  # noqa: BLE001 - the endpoint fails with the reason instead of hanging
            self._failed(f"InternalServerError: {type(err).__name__}: {err}")

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.health_timeout
        unhealthy = (
            f"The primary container for production variant {self.variant} did not pass the ping health check. "
            f"Please check CloudWatch logs for this endpoint."
        )
        while True:
            if self.deleted.is_set():
                raise LocalError("ClientError: the endpoint was deleted while it was being created")
            code = self.proc.poll()
            if code is not None:
                raise LocalError(f"{unhealthy} (the container exited with exit code {code})")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/ping", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise LocalError(f"{unhealthy} (no 200 from /ping within {self.health_timeout:.0f} s)")
            time.sleep(0.1)

    def _set(self, change) -> None:
        endpoint = self.endpoint

        def apply() -> None:
            if endpoint.endpoint_status == "Creating" and not self.deleted.is_set():
                change(endpoint)
                endpoint.last_modified_time = utcnow()

        in_moto(apply)

    def _failed(self, reason: str) -> None:
        if self.proc is not None:
            threading.Thread(target=terminate, args=(self.proc, 5.0), daemon=True).start()

        def change(endpoint) -> None:
            endpoint.endpoint_status = "Failed"
            endpoint.failure_reason = reason

        self._set(change)

    def stop(self, grace_s: float = 30.0) -> None:
        """DeleteEndpoint: the container gets SIGTERM, SIGKILL after ``grace_s`` (in the background)."""
        with self._lock:
            self.deleted.set()
            proc = self.proc
        if proc is not None:
            threading.Thread(target=terminate, args=(proc, grace_s), daemon=True).start()

    def kill(self) -> None:
        with self._lock:
            self.deleted.set()
            proc = self.proc
        if proc is not None:
            signal_group(proc, signal.SIGKILL)


def _error(status: int, code: str, message: str, **extra) -> tuple[int, dict, str]:
    body = {"__type": code, "Message": message, "message": message, **extra}
    # moto takes the status from the "status" header of a handler's answer.
    headers = {"Content-Type": "application/json", "x-amzn-ErrorType": code, "status": str(status)}
    return status, headers, json.dumps(body)


def invoke(self) -> tuple[int, dict, bytes | str]:
    """SageMakerRuntimeResponse.invoke_endpoint: forwards the request to the endpoint's container."""
    account_id, region = self.current_account, self.region
    name = urllib.parse.unquote(self.path.split("?")[0].split("/")[2])
    endpoint = sagemaker_backends[account_id][region].endpoints.get(name)
    if endpoint is None:
        return _error(400, "ValidationError", f"Endpoint {name} of account {account_id} not found.")
    with _runs_lock:
        run = _runs.get((account_id, region, name))
    if run is None or endpoint.endpoint_status != "InService" or run.port is None:
        return _error(
            400, "ValidationError", f"Endpoint {name} of account {account_id} is in status {endpoint.endpoint_status}, not InService."
        )
    body = getattr(self, "raw_body", None)
    if body is None:
        body = self.body
    if isinstance(body, str):
        body = body.encode("utf-8")
    request = urllib.request.Request(f"http://127.0.0.1:{run.port}/invocations", data=body or b"", method="POST")
    for header in ("Content-Type", "Accept", "X-Amzn-SageMaker-Custom-Attributes"):
        value = self.headers.get(header)
        if value:
            request.add_header(header, value)
    try:
        with urllib.request.urlopen(request, timeout=INVOCATION_TIMEOUT_S) as response:
            payload = response.read()
            headers = {
                "Content-Type": response.headers.get("Content-Type", "application/octet-stream"),
                "x-Amzn-Invoked-Production-Variant": run.variant,
            }
            custom = response.headers.get("X-Amzn-SageMaker-Custom-Attributes")
            if custom:
                headers["X-Amzn-SageMaker-Custom-Attributes"] = custom
            return 200, headers, payload
    except urllib.error.HTTPError as err:
        original = err.read().decode("utf-8", errors="replace")
        kind = "client" if err.code < 500 else "server"
        message = (
            f"Received {kind} error ({err.code}) from primary with message \"{original}\". "
            f"See https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#logEventViewer:"
            f"group=/aws/sagemaker/Endpoints/{name} in account {account_id} for more information."
        )
        return _error(
            424, "ModelError", message, OriginalStatusCode=err.code, OriginalMessage=original, LogStreamArn=run.log_stream_arn
        )
    except (urllib.error.URLError, OSError) as err:
        if run.proc is not None and run.proc.poll() is not None:
            return _error(503, "ServiceUnavailable", f"The container of endpoint {name} is not running.")
        return _error(
            424,
            "ModelError",
            f"Your invocation timed out or failed while waiting for a response from container primary: {err}",
            LogStreamArn=run.log_stream_arn,
        )


def _reset() -> None:
    with _runs_lock:
        runs = list(_runs.values())
        _runs.clear()
    for run in runs:
        run.kill()


def apply() -> None:
    install_reset_hook()
    on_reset(_reset)

    def make_create(original):
        def create_endpoint(self, endpoint_name, endpoint_config_name, tags):
            if endpoint_name in self.endpoints:
                arn = FakeEndpoint.arn_formatter(endpoint_name, self.account_id, self.region_name)
                raise ValidationError(message=f'Cannot create already existing endpoint "{arn}".')
            endpoint = original(self, endpoint_name, endpoint_config_name, tags)
            endpoint.endpoint_status = "Creating"
            endpoint.failure_reason = None
            config = self.endpoint_configs[endpoint_config_name]
            variant = (config.production_variants or [{}])[0]
            model = self._models.get(variant.get("ModelName"))
            container = {}
            if model is not None:
                container = model.primary_container or (model.containers or [{}])[0]
            run = EndpointRun(self, endpoint, variant, container or {})
            with _runs_lock:
                _runs[(self.account_id, self.region_name, endpoint_name)] = run
            run.start()
            return endpoint

        return create_endpoint

    def make_delete(original):
        def delete_endpoint(self, endpoint_name):
            original(self, endpoint_name)
            with _runs_lock:
                run = _runs.pop((self.account_id, self.region_name, endpoint_name), None)
            if run is not None:
                run.stop()

        return delete_endpoint

    wrap(SageMakerModelBackend, "create_endpoint", make_create)
    wrap(SageMakerModelBackend, "delete_endpoint", make_delete)
    SageMakerRuntimeResponse.invoke_endpoint = invoke  # type: ignore[method-assign]
    # Bodies are the caller's bytes (images); moto would decode them as UTF-8 and fail with 500.
    SageMakerRuntimeResponse.use_raw_body = True

