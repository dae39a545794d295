//! The runtime contracts end to end through the binary: SageMaker layout, failure reason,
//! exit codes, checkpoint resume, SIGTERM.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use kfaws_trainer::data::{load_dir, DatasetKind};

/// A SageMaker root for one host whose `training` channel links to the real Fashion-MNIST.
fn sagemaker_root(dir: &Path, hyperparameters: &str) -> std::path::PathBuf {
    let root = dir.join("opt-ml");
    let config = root.join("input/config");
    let channel = root.join("input/data/training");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::create_dir_all(&channel).unwrap();
    for entry in std::fs::read_dir(fashion_mnist()).unwrap() {
        let entry = entry.unwrap();
        std::os::unix::fs::symlink(entry.path(), channel.join(entry.file_name())).unwrap();
    }
    std::fs::write(
        config.join("resourceconfig.json"),
        r#"{"current_host": "algo-1", "hosts": ["algo-1"]}"#,
    )
    .unwrap();
    std::fs::write(config.join("hyperparameters.json"), hyperparameters).unwrap();
    root
}

/// The signature, `IHDR` chunk and an empty `IDAT` chunk of a PNG of `width`×`height` 8-bit
/// grey pixels: what a decoder reads to learn the size, without the image data (PNG
/// specification, 3rd edition, 5.2–5.3 and 11.2.1).
fn png_header(width: u32, height: u32) -> Vec<u8> {
    let chunk = |kind: &[u8], data: &[u8]| {
        let mut typed = kind.to_vec();
        typed.extend(data);
        let mut crc = flate2::Crc::new();
        crc.update(&typed);
        let mut out = u32::try_from(data.len()).unwrap().to_be_bytes().to_vec();
        out.extend(typed);
        out.extend(crc.sum().to_be_bytes());
        out
    };
    let mut ihdr = width.to_be_bytes().to_vec();
    ihdr.extend(height.to_be_bytes());
    ihdr.extend([8, 0, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(chunk(b"IHDR", &ihdr));
    png.extend(chunk(b"IDAT", &[]));
    png
}

/// Sends the head of a `POST path` whose 50,000-byte body never follows; returns the open
/// connection and the response, if one came within `wait` (an admitted invocation gets none).
fn stalled_post(port: u16, path: &str, wait: Duration) -> (std::net::TcpStream, Option<String>) {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(
            format!(
                "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: image/png\r\n\
                 Content-Length: 50000\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let answer = read_answer(&mut stream, wait);
    (stream, answer)
}

/// The first bytes `stream` receives within `wait`, if any.
fn read_answer(stream: &mut std::net::TcpStream, wait: Duration) -> Option<String> {
    use std::io::Read;
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 512];
    match stream.read(&mut buf) {
        Ok(n) if n > 0 => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        _ => None,
    }
}

/// `serve --body-timeout-secs` in the serving test: longer than sending 6 stalled invocations
/// takes (at most 2 s each while none is answered).
const BODY_TIMEOUT_SECS: u64 = 15;

/// Train in a SageMaker layout, then `serve` the model it wrote and classify a real
/// Fashion-MNIST test image sent as PNG.
#[test]
fn sagemaker_layout_trains_then_serves_a_real_test_image() {
    let dir = tempfile::tempdir().unwrap();
    // As the SageMaker Python SDK writes them: every value a JSON-encoded string.
    let root = sagemaker_root(
        dir.path(),
        r#"{"backend": "\"gloo\"", "batch-size": "64", "epochs": "1", "lr": "0.02", "model-type": "\"custom\"",
            "max-train-samples": "12800", "dataset": "\"fashion-mnist\"", "sagemaker_program": "\"train.py\""}"#,
    );
    // An earlier failed run under the same root: its reason does not outlive this success.
    std::fs::create_dir_all(root.join("output")).unwrap();
    std::fs::write(root.join("output/failure"), "an earlier run's reason").unwrap();
    let mut p = spawn_train(
        dir.path(),
        "sm",
        &[],
        &[("TRAINER_SAGEMAKER_ROOT", root.display().to_string())],
    );
    assert_eq!(p.wait(Duration::from_secs(600)), 0, "{}", p.stderr());
    assert!(p.stderr().contains("SageMaker"), "{}", p.stderr());
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("model/model.json")).unwrap()).unwrap();
    assert_eq!(info["dataset"], "fashion-mnist");
    assert_eq!(info["classes"][9], "Ankle boot");
    assert!(info["test_accuracy"].as_f64().unwrap() > 0.6, "{info}");
    assert!(root.join("model/model.bpk").is_file());
    assert!(root
        .join("checkpoints/checkpoint-000002-00000000.bin")
        .is_file());
    assert!(!root.join("output/failure").exists());

    let port = free_port();
    let mut server = spawn_serve(
        dir.path(),
        &root.join("model"),
        port,
        &[
            "--max-body-bytes=100000",
            "--workers=1",
            &format!("--body-timeout-secs={BODY_TIMEOUT_SECS}"),
        ],
    );
    wait_for_ping(port, Duration::from_secs(60));
    let test = load_dir(&fashion_mnist(), Some(DatasetKind::FashionMnist))
        .unwrap()
        .test;
    let png = |i: usize, side: u32| {
        let image = image::GrayImage::from_raw(28, 28, test.image(i).to_vec()).unwrap();
        let image =
            image::imageops::resize(&image, side, side, image::imageops::FilterType::Nearest);
        let mut out = std::io::Cursor::new(Vec::new());
        image.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    };
    let (status, body) = http(
        port,
        "POST",
        "/invocations",
        "application/x-image",
        &png(0, 28),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["index"], u64::from(test.labels[0]), "{answer}");
    assert_eq!(
        answer["label"],
        DatasetKind::FashionMnist.classes()[usize::from(test.labels[0])]
    );
    assert_eq!(answer["score"][0].as_array().unwrap().len(), 10);
    // The answer is JSON: an Accept that does not allow it is 406 (SageMaker passes Accept on).
    let (status, body) = http_with(
        port,
        "POST",
        "/invocations",
        &[("Content-Type", "image/png"), ("Accept", "text/csv")],
        &png(0, 84),
    )
    .unwrap();
    assert_eq!(status, 406, "{body}");
    // Any size is resized to 28×28.
    let (status, _) = http(port, "POST", "/invocations", "image/png", &png(0, 84)).unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        http(port, "POST", "/invocations", "text/csv", b"1,2")
            .unwrap()
            .0,
        415
    );
    assert_eq!(
        http(
            port,
            "POST",
            "/invocations",
            "application/x-image",
            b"garbage"
        )
        .unwrap()
        .0,
        400
    );
    assert_eq!(
        http(
            port,
            "POST",
            "/invocations",
            "application/x-image",
            &vec![0u8; 200_000]
        )
        .unwrap()
        .0,
        413
    );
    // A small PNG whose header declares 20000×20000 pixels is refused before decoding.
    let (status, body) = http(
        port,
        "POST",
        "/invocations",
        "image/png",
        &png_header(20_000, 20_000),
    )
    .unwrap();
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("20000×20000"), "{body}");
    // A body sent where none is taken is answered at once, without waiting for it.
    let (wrong, answer) = stalled_post(port, "/ping", Duration::from_secs(3));
    assert!(
        answer.as_deref().is_some_and(
            |a| a.starts_with("HTTP/1.1 405") && a.to_ascii_lowercase().contains("allow: get")
        ),
        "{answer:?}"
    );
    // /ping's body is JSON, as its content type says.
    let (status, body) = http(port, "GET", "/ping", "text/plain", b"").unwrap();
    assert_eq!(status, 200, "{body}");
    let ping: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ping["status"], "healthy", "{body}");
    // HEAD as GET, without the body (RFC 9110 §9.3.2).
    assert_eq!(
        http(port, "HEAD", "/ping", "text/plain", b"").unwrap(),
        (200, String::new())
    );
    drop(wrong);
    // Invocations whose bodies never come are admitted up to the one worker plus its queue of
    // 4; the 6th is shed with 503 at once, and /ping is answered all the while.
    let started = std::time::Instant::now();
    let mut stalled = Vec::new();
    let shed = loop {
        let (stream, answer) = stalled_post(port, "/invocations", Duration::from_secs(2));
        if let Some(answer) = answer {
            break answer;
        }
        stalled.push(stream);
        assert!(
            stalled.len() <= 5,
            "no 503 after {} invocations",
            stalled.len()
        );
    };
    assert!(shed.starts_with("HTTP/1.1 503"), "{shed}");
    assert_eq!(stalled.len(), 5, "503 after 1 worker + 4 queued");
    assert!(
        started.elapsed() < Duration::from_secs(BODY_TIMEOUT_SECS),
        "the test's own timing: raise BODY_TIMEOUT_SECS"
    );
    assert_eq!(
        http(port, "GET", "/ping", "text/plain", b"").unwrap().0,
        200
    );
    // Each gets 408 once --body-timeout-secs has passed, which frees its place.
    for stream in &mut stalled {
        let answer = read_answer(stream, Duration::from_secs(BODY_TIMEOUT_SECS + 10));
        assert!(
            answer
                .as_deref()
                .is_some_and(|a| a.starts_with("HTTP/1.1 408")),
            "{answer:?}"
        );
    }
    let (status, body) = http(port, "POST", "/invocations", "image/png", &png(0, 28)).unwrap();
    assert_eq!(status, 200, "{body}");
    drop(stalled);
    // A request in progress at the stop signal is still answered: half its body is sent
    // before SIGTERM, the rest after; then the server exits 0.
    let image = png(0, 28);
    let (head, tail) = image.split_at(image.len() / 2);
    let mut pending = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    {
        use std::io::Write;
        pending
            .write_all(
                format!(
                    "POST /invocations HTTP/1.1\r\nHost: localhost\r\nContent-Type: image/png\r\n\
                     Content-Length: {}\r\n\r\n",
                    image.len()
                )
                .as_bytes(),
            )
            .unwrap();
        pending.write_all(head).unwrap();
        std::thread::sleep(Duration::from_secs(1));
        assert!(std::process::Command::new("kill")
            .args(["-TERM", &server.child.id().to_string()])
            .status()
            .unwrap()
            .success());
        std::thread::sleep(Duration::from_millis(500));
        pending.write_all(tail).unwrap();
    }
    let answer = read_answer(&mut pending, Duration::from_secs(10));
    assert!(
        answer
            .as_deref()
            .is_some_and(|a| a.starts_with("HTTP/1.1 200")),
        "{answer:?}\n{}",
        server.stderr()
    );
    assert_eq!(
        server.wait(Duration::from_secs(15)),
        0,
        "graceful exit on SIGTERM\n{}",
        server.stderr()
    );
}

#[test]
fn sagemaker_configuration_error_exits_1_and_writes_the_failure_reason() {
    let dir = tempfile::tempdir().unwrap();
    let root = sagemaker_root(dir.path(), r#"{"batch-size": "\"lots\""}"#);
    let mut p = spawn_train(
        dir.path(),
        "sm",
        &[],
        &[("TRAINER_SAGEMAKER_ROOT", root.display().to_string())],
    );
    assert_eq!(p.wait(Duration::from_secs(60)), 1, "{}", p.stderr());
    let reason = std::fs::read_to_string(root.join("output/failure")).unwrap();
    assert!(
        reason.contains("\"batch-size\"") && reason.contains("positive integer"),
        "{reason}"
    );
}

/// A `TRAINER_*` value that does not parse fails in the flag parser, before the run is
/// configured: under SageMaker its message still reaches the failure file (FailureReason),
/// while `--help` and `--version` exit 0 and write nothing there.
#[test]
fn sagemaker_flag_parse_error_exits_1_and_writes_the_failure_reason() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("opt-ml");
    std::fs::create_dir_all(root.join("input/config")).unwrap();
    std::fs::write(
        root.join("input/config/resourceconfig.json"),
        r#"{"current_host": "algo-1", "hosts": ["algo-1"]}"#,
    )
    .unwrap();
    let failure = root.join("output/failure");
    let run = |args: &[&str], threads: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kfaws-trainer"));
        command
            .args(args)
            .env("TRAINER_SAGEMAKER_ROOT", &root)
            .env_remove("TRAINER_THREADS")
            .stdin(std::process::Stdio::null());
        if let Some(threads) = threads {
            command.env("TRAINER_THREADS", threads);
        }
        command.output().unwrap()
    };
    for args in [&["train", "--help"][..], &["--version"], &["--help"]] {
        let out = run(args, Some("x"));
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!failure.exists(), "{args:?} wrote {}", failure.display());
    }
    let out = run(&["train"], Some("x"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let reason = std::fs::read_to_string(&failure).unwrap();
    assert!(
        reason.contains("--threads") && reason.contains("'x'"),
        "{reason}"
    );
    assert!(stderr.contains(reason.trim_end()), "{stderr}\n{reason}");
    // `--sagemaker-root` names the root as it would for a run that parses.
    std::fs::remove_file(&failure).unwrap();
    let elsewhere = dir.path().join("no-sagemaker");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kfaws-trainer"));
    let out = command
        .args(["train", "--threads=x", "--sagemaker-root"])
        .arg(&root)
        .env("TRAINER_SAGEMAKER_ROOT", &elsewhere)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(failure.is_file());
}

#[test]
fn missing_dataset_exits_1_naming_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let mut p = spawn_train(
        dir.path(),
        "p",
        &[format!("--data-dir={}", empty.display())],
        &[],
    );
    assert_eq!(p.wait(Duration::from_secs(60)), 1);
    assert!(
        p.stderr().contains("no dataset found in") && p.stderr().contains("empty"),
        "{}",
        p.stderr()
    );
}

/// `TRAINER_REQUIRE_CHECKPOINT` (here spelled `1`, as a shell would) with an empty checkpoint
/// directory: exit 1 before any epoch, naming the directory.
#[test]
fn a_required_checkpoint_that_is_missing_exits_1() {
    let data = fashion_mnist();
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("ckpt");
    let mut p = spawn_train(
        dir.path(),
        "p",
        &[
            format!("--data-dir={}", data.display()),
            format!("--model-dir={}", dir.path().join("model").display()),
            format!("--checkpoint-dir={}", checkpoints.display()),
            "--hp=max-train-samples=200".into(),
        ],
        &[("TRAINER_REQUIRE_CHECKPOINT", "1".into())],
    );
    assert_eq!(p.wait(Duration::from_secs(120)), 1, "{}", p.stderr());
    assert!(
        p.stderr().contains(&format!(
            "no checkpoint to resume from in {}, and this run requires one",
            checkpoints.display()
        )) && !p.stdout().contains("epoch="),
        "{}",
        p.stderr()
    );
}

/// `kfaws-trainer train | head`: a closed stdout loses the metric lines, not the run. The
/// trainer finishes, writes its model and exits 0 (a panic on the failed write would exit 101
/// with no model).
#[test]
fn closed_stdout_does_not_stop_training() {
    let data = fashion_mnist();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kfaws-trainer"))
        .arg("train")
        .arg(format!("--data-dir={}", data.display()))
        .arg(format!("--model-dir={}", model.display()))
        .args(["--hp=epochs=1", "--hp=max-train-samples=640"])
        .args(["--hp=test-batch-size=1000", "--hp=log-interval=1"])
        .args(backend_args())
        .env("TRAINER_SAGEMAKER_ROOT", dir.path().join("no-sagemaker"))
        .env_remove("MASTER_ADDR")
        .env_remove("WORLD_SIZE")
        .env_remove("PET_NNODES")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the first line is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(model.join("model.json").is_file(), "{err}");
}

/// A configuration error logged to a closed stderr keeps exit 1 (not a panic's 101, which the
/// ExitCode restart policy would read as a crash): the log writer's own failure is not reported
/// with a panicking `eprintln!`.
#[test]
fn a_configuration_error_on_a_closed_stderr_still_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_kfaws-trainer"))
        .args(["train", "--hp=lr=-1"])
        .env("TRAINER_SAGEMAKER_ROOT", dir.path().join("no-sagemaker"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
}

/// Flags that do not parse, and thread settings that cannot work, are configuration errors:
/// exit 1 naming the flag, before any data is read.
#[test]
fn bad_thread_flags_exit_1_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (flags, env, needle) in [
        (vec!["--threads=abc"], vec![], "--threads"),
        (
            vec!["--threads=1", "--replicas=2"],
            vec![],
            "2 replicas need at least 2 threads, 1 given",
        ),
        (
            vec![],
            vec![("TRAINER_REPLICAS", "0".to_string())],
            "replicas must be at least 1",
        ),
    ] {
        let flags: Vec<String> = ["--data-dir=/nonexistent"]
            .iter()
            .chain(&flags)
            .map(|f| f.to_string())
            .collect();
        let mut p = spawn_train(dir.path(), "p", &flags, &env);
        assert_eq!(
            p.wait(Duration::from_secs(60)),
            1,
            "{flags:?}: {}",
            p.stderr()
        );
        assert!(p.stderr().contains(needle), "{flags:?}: {}", p.stderr());
    }
}

/// SIGTERM mid-epoch writes a checkpoint at the current step and exits 143; the next run
/// resumes from that step, then a later run with more epochs resumes at the epoch boundary.
#[test]
fn sigterm_checkpoints_and_the_next_run_resumes() {
    let data = fashion_mnist();
    let dir = tempfile::tempdir().unwrap();
    let args = |epochs: u64| {
        vec![
            format!("--data-dir={}", data.display()),
            format!("--model-dir={}", dir.path().join("model").display()),
            format!("--checkpoint-dir={}", dir.path().join("ckpt").display()),
            format!("--hp=epochs={epochs}"),
            // The whole training set (938 steps of 64): the SIGTERM sent at step 30 must land
            // mid-epoch however fast the machine trains (≈ 4 s per epoch measured on 2 cores).
            "--hp=max-train-samples=60000".into(),
            "--hp=log-interval=10".into(),
        ]
    };
    let mut first = spawn_train(dir.path(), "first", &args(1), &[]);
    first.wait_for_log("step=30", Duration::from_secs(300));
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &first.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert_eq!(
        first.wait(Duration::from_secs(30)),
        143,
        "{}",
        first.stderr()
    );
    assert!(
        first.stderr().contains("checkpoint written"),
        "{}",
        first.stderr()
    );
    if let Err(saved) = has_mid_epoch_checkpoint(&dir.path().join("ckpt")) {
        panic!("no mid-epoch checkpoint: {saved:?}");
    }

    let mut second = spawn_train(dir.path(), "second", &args(1), &[]);
    assert_eq!(
        second.wait(Duration::from_secs(300)),
        0,
        "{}",
        second.stderr()
    );
    assert!(
        second.stderr().contains("resuming from checkpoint"),
        "{}",
        second.stderr()
    );
    assert_eq!(second.test_accuracies().len(), 1);

    let mut third = spawn_train(dir.path(), "third", &args(2), &[]);
    assert_eq!(
        third.wait(Duration::from_secs(300)),
        0,
        "{}",
        third.stderr()
    );
    assert!(
        third.stdout().starts_with("epoch=2 "),
        "only epoch 2 runs:\n{}",
        third.stdout()
    );

    // Restarted after the last epoch (a retried job): nothing is trained, the checkpointed
    // model is evaluated and its test figures reported under the last epoch's number.
    let mut fourth = spawn_train(dir.path(), "fourth", &args(2), &[]);
    assert_eq!(
        fourth.wait(Duration::from_secs(300)),
        0,
        "{}",
        fourth.stderr()
    );
    let line = fourth.stdout();
    assert!(
        line.starts_with("epoch=2 test_loss=") && !line.contains("train_loss"),
        "{line}"
    );
    assert_eq!(fourth.test_accuracies(), third.test_accuracies(), "{line}");
}

/// A rank started with `--parent-pid` whose parent dies mid-epoch (as a local job's kfaws
/// killed with SIGKILL) stops as after SIGTERM: it writes a checkpoint and exits, instead of
/// training on unwatched. The parent here is a shell that starts the rank in the background
/// and exits once training has begun.
#[test]
fn a_rank_whose_parent_dies_checkpoints_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    let (err, pid) = (path("rank.err"), path("rank.pid"));
    let script = "TRAINER_PARENT_PID=$$ \"$0\" train \"$@\" >/dev/null 2>\"$ERR\" & \
                  echo $! >\"$PID\"; \
                  until grep -q step= \"$ERR\"; do sleep 0.1; done";
    let status = std::process::Command::new("sh")
        .args(["-c", script, env!("CARGO_BIN_EXE_kfaws-trainer")])
        .arg(format!("--data-dir={}", fashion_mnist().display()))
        .arg(format!("--model-dir={}", path("model")))
        .arg(format!("--checkpoint-dir={}", path("ckpt")))
        // The whole training set: the parent dies well before the epoch ends.
        .args([
            "--hp=epochs=1",
            "--hp=max-train-samples=60000",
            "--hp=log-interval=10",
        ])
        .args(backend_args())
        .env("ERR", &err)
        .env("PID", &pid)
        .env("RUST_LOG", "info")
        .env("TRAINER_SAGEMAKER_ROOT", path("no-sagemaker"))
        .env_remove("MASTER_ADDR")
        .env_remove("WORLD_SIZE")
        .env_remove("PET_NNODES")
        .stdin(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let pid = std::fs::read_to_string(&pid).unwrap().trim().to_string();
    // Gone, or a zombie nobody reaps (the rank is not this test's child any more).
    let running = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
        })
    };
    let start = std::time::Instant::now();
    while running() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(&err).unwrap();
    assert!(
        !running(),
        "still training 60 s after its parent died:\n{log}"
    );
    assert!(
        log.contains("the process that started this rank is gone")
            && log.contains("checkpoint written"),
        "{log}"
    );
    if let Err(saved) = has_mid_epoch_checkpoint(&dir.path().join("ckpt")) {
        panic!("no mid-epoch checkpoint: {saved:?}");
    }
}

/// A rank blocked in the rendezvous (its rank 0 never comes) exits 143 at once on SIGTERM,
/// not after its stop grace (here a minute): before every rank has joined there is no step to
/// finish and nothing to save.
#[test]
fn sigterm_while_waiting_for_peers_to_join_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        format!("--data-dir={}", fashion_mnist().display()),
        "--rank=1".to_string(),
        "--world-size=2".to_string(),
        "--master-addr=127.0.0.1".to_string(),
        format!("--master-port={}", free_port()),
        "--stop-grace-secs=60".to_string(),
    ];
    let mut p = spawn_train(dir.path(), "waiting", &args, &[]);
    p.wait_for_log("dataset loaded", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(300));
    let sent = std::time::Instant::now();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert_eq!(p.wait(Duration::from_secs(20)), 143, "{}", p.stderr());
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "took {:?}",
        sent.elapsed()
    );
    assert!(
        p.stderr().contains(
            "signalled to stop before training started (loading data, or waiting for the \
                 other ranks to join)"
        ),
        "{}",
        p.stderr()
    );
}

/// Once the ranks have joined, a rank told to stop while blocked in a collective (its peer is
/// stopped with SIGSTOP, so it neither answers nor fails) exits 143 when its stop grace ends.
#[test]
fn sigterm_while_blocked_in_a_collective_exits_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let hp = ["epochs=1", "max-train-samples=60000", "log-interval=10"];
    let mut ranks: Vec<Proc> = (0..2)
        .map(|rank| {
            let mut args = rank_args(dir.path(), &fashion_mnist(), rank, 2, port, &hp);
            args.push("--stop-grace-secs=1".into());
            spawn_train(dir.path(), &format!("rank{rank}"), &args, &[])
        })
        .collect();
    ranks[0].wait_for_log("step=20", Duration::from_secs(120));
    let signal = |flag: &str, p: &Proc| {
        assert!(std::process::Command::new("kill")
            .args([flag, &p.child.id().to_string()])
            .status()
            .unwrap()
            .success());
    };
    signal("-STOP", &ranks[0]);
    signal("-TERM", &ranks[1]);
    assert_eq!(
        ranks[1].wait(Duration::from_secs(20)),
        143,
        "{}",
        ranks[1].stderr()
    );
    assert!(
        ranks[1]
            .stderr()
            .contains("(blocked waiting for peers); exiting"),
        "{}",
        ranks[1].stderr()
    );
    signal("-KILL", &ranks[0]);
    let _ = ranks[0].wait(Duration::from_secs(20));
}

/// `kfaws-trainer check-data` reads a directory as `train` does and says what it holds, or
/// why `train` would refuse it as one plain line (kfaws shows it as its reason to refuse
/// `--data` before starting ranks or uploading).
#[test]
fn check_data_reads_the_directory_as_train_does() {
    let check = |dir: &Path, extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kfaws-trainer"))
            .arg("check-data")
            .arg("--data-dir")
            .arg(dir)
            .args(extra)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = check(&fashion_mnist(), &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "dataset=fashion-mnist train=60000 test=10000 shape=1x28x28\n"
    );
    assert_eq!(stderr, "", "no log lines below warnings");

    let (code, stdout, stderr) = check(&fashion_mnist(), &["--dataset", "cifar10"]);
    assert_eq!(code, Some(1));
    assert_eq!(stdout, "");
    assert!(
        stderr.starts_with("the dataset hyperparameter says cifar10, but")
            && stderr.lines().count() == 1,
        "{stderr}"
    );

    // A directory of 25 unrelated files: the error lists 20 names and counts the rest.
    let dir = tempfile::tempdir().unwrap();
    for i in 0..25 {
        std::fs::write(dir.path().join(format!("file{i:02}.txt")), "x").unwrap();
    }
    let (code, _, stderr) = check(dir.path(), &[]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.starts_with(&format!("no dataset found in {}", dir.path().display()))
            && stderr.contains("file00.txt, ")
            && stderr.contains("file19.txt, … 5 more]")
            && !stderr.contains("file20.txt"),
        "{stderr}"
    );
}

/// A rank whose launcher (`--parent-pid`) is not its parent, as under a `--trainer` wrapper
/// script that runs it without `exec`, trains on while the launcher runs, and stops as after
/// SIGTERM once the launcher is gone although its own parent (here the test) stays.
#[test]
fn a_rank_stops_when_its_launcher_is_gone_even_when_it_is_not_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let mut rank = std::process::Command::new(env!("CARGO_BIN_EXE_kfaws-trainer"))
        .arg("train")
        .arg(format!("--data-dir={}", fashion_mnist().display()))
        .arg(format!(
            "--model-dir={}",
            dir.path().join("model").display()
        ))
        .arg(format!(
            "--checkpoint-dir={}",
            dir.path().join("ckpt").display()
        ))
        .args([
            "--hp=epochs=1",
            "--hp=max-train-samples=60000",
            "--hp=log-interval=10",
        ])
        .args(backend_args())
        .env("TRAINER_PARENT_PID", launcher.id().to_string())
        .env("RUST_LOG", "info")
        .env("TRAINER_SAGEMAKER_ROOT", dir.path().join("no-sagemaker"))
        .env_remove("MASTER_ADDR")
        .env_remove("WORLD_SIZE")
        .env_remove("PET_NNODES")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::{BufRead as _, BufReader};
    let mut lines = BufReader::new(rank.stderr.take().unwrap()).lines();
    let mut log = String::new();
    // Training under a live launcher that is not its parent: not stopped.
    for line in lines.by_ref() {
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        if line.contains("step=20") {
            break;
        }
    }
    assert!(!log.contains("is gone"), "{log}");
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    log.extend(lines.map(|l| l.unwrap() + "\n"));
    let status = rank.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{log}");
    assert!(
        log.contains("the process that started this rank is gone")
            && log.contains("checkpoint written"),
        "{log}"
    );
}

/// `serve` with a `model.json` whose `input_shape` the network cannot take (14×14) exits 1
/// naming the file, the field and the rule, before it listens (it used to panic, exit 101);
/// and one with too few `classes` for the model's 10 outputs exits 1 too, never answering
/// `/ping`.
#[test]
fn serve_refuses_a_model_json_that_does_not_fit_the_model() {
    use burn::module::Module as _;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    let kind = DatasetKind::FashionMnist;
    kfaws_trainer::model::Net::new(kind.shape(), &burn::tensor::Device::flex())
        .save_file(model.join(kfaws_trainer::MODEL_FILE))
        .unwrap();
    let info = kfaws_trainer::ModelInfo::for_dataset(kind, 44_426);
    let cases = [
        (
            kfaws_trainer::ModelInfo {
                input_shape: [1, 14, 14],
                ..info.clone()
            },
            "`input_shape` [1, 14, 14] is 14×14 pixels; the network takes at least 16×16",
        ),
        (
            kfaws_trainer::ModelInfo {
                classes: info.classes[..3].to_vec(),
                ..info.clone()
            },
            "`classes` has 3 entries; the model (model.bpk) has 10 outputs",
        ),
    ];
    for (bad, expected) in cases {
        std::fs::write(
            model.join(kfaws_trainer::MODEL_INFO_FILE),
            serde_json::to_string(&bad).unwrap(),
        )
        .unwrap();
        let port = free_port();
        let mut server = spawn_serve(dir.path(), &model, port, &[]);
        assert_eq!(
            server.wait(Duration::from_secs(30)),
            1,
            "{}",
            server.stderr()
        );
        assert!(
            server.stderr().contains("model.json") && server.stderr().contains(expected),
            "{}",
            server.stderr()
        );
    }
}
