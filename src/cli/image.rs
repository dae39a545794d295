//! `kfaws image build` and `kfaws image push`.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use kfaws::image::{layout, Image};

use super::Global;

/// The tag when none is given: the trainer's name and this kfaws version.
fn default_tag() -> String {
    format!("kfaws-trainer:{}", env!("CARGO_PKG_VERSION"))
}

/// Checks `name:tag` against the Docker reference grammar
/// (distribution/reference, `reference.go`): an optional registry host
/// (`registry.example.com:5000/`, the first component when it holds a `.`
/// or `:` or is `localhost`), path components of lowercase letters and
/// digits joined by `.`, `_`, `__` or `-`, each `/`-separated, then `:` and
/// a tag `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`. A reference without a tag is
/// refused: kfaws does not assume `:latest`.
fn check_tag(tag: &str) -> anyhow::Result<()> {
    let layout::Reference { host, path, tag: t } = layout::Reference::split(tag);
    let Some(t) = t else {
        anyhow::bail!(
            "--tag {tag:?} has no tag: write NAME:TAG, e.g. kfaws-trainer:1 (kfaws does not \
             assume :latest)"
        )
    };
    let host_ok = host.is_none_or(|h| {
        let (h, port) = h.split_once(':').unwrap_or((h, "1"));
        !h.is_empty()
            && h.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-".contains(c))
            && !port.is_empty()
            && port.chars().all(|c| c.is_ascii_digit())
    });
    let component =
        regex_lite::Regex::new(r"^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$").expect("valid regex");
    let path_ok = path.split('/').all(|c| component.is_match(c));
    let tag_ok = (1..=128).contains(&t.len())
        && !t.starts_with(['.', '-'])
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    anyhow::ensure!(
        host_ok && path_ok && tag_ok,
        "--tag {tag:?} is invalid: write [HOST[:PORT]/]NAME:TAG, the name lowercase letters and \
         digits separated by . _ - or /, the tag at most 128 of letters, digits and _.- not \
         starting with . or - (Docker reference grammar)"
    );
    Ok(())
}

/// How long `BINARY --version` may take before `kfaws image build` stops
/// it and refuses the binary, in seconds: the trainer answers at once, so a
/// binary still running after this ignores `--version` (and would otherwise
/// hang the build).
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the `--version` child is polled for its exit.
const VERSION_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Runs `trainer --version`, stdin empty, stderr discarded; kills it and
/// answers `None` when it has not exited within `limit`. Polls
/// `try_wait` (this command is synchronous), its stdout read on a thread so
/// a child writing much cannot block on a full pipe.
fn run_version(trainer: &Path, limit: Duration) -> std::io::Result<Option<std::process::Output>> {
    use std::io::Read as _;
    use std::process::Stdio;

    let mut child = std::process::Command::new(trainer)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(VERSION_POLL);
    };
    // A grandchild still holding stdout open: what was read so far is not
    // waited for beyond the same limit.
    let stdout = rx
        .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
        .unwrap_or_default();
    Ok(Some(std::process::Output {
        status,
        stdout,
        stderr: Vec::new(),
    }))
}

/// Refuses a binary that is not the kfaws trainer (`--trainer /bin/ls`
/// would make an image every training job fails in): runs `BINARY
/// --version`, which the trainer answers `kfaws-trainer VERSION (backends:
/// gloo …)`, and returns those backends. A binary that has not answered
/// within `limit` ([`VERSION_TIMEOUT`]) is killed and refused. A binary this machine
/// cannot run (exec format error: this machine is not x86-64, the image's
/// architecture, which [`Image::build`] has already checked) is let through
/// with a warning, and its backends are not known (`None`).
fn check_is_trainer(trainer: &Path, limit: Duration) -> anyhow::Result<Option<Vec<String>>> {
    let output = match run_version(trainer, limit) {
        Ok(Some(output)) => output,
        Ok(None) => anyhow::bail!(
            "{} did not answer --version within {limit:?}: it is not the kfaws trainer, which \
             answers at once; pass the kfaws-trainer binary built with `cargo build --workspace \
             --bins`",
            trainer.display(),
        ),
        // ENOEXEC, "Exec format error" (errno 8 on Linux, asm-generic/errno-base.h).
        Err(e) if e.raw_os_error() == Some(8) => {
            tracing::warn!(
                "{} cannot run on this machine ({e}); not checked to be the kfaws trainer",
                trainer.display()
            );
            return Ok(None);
        }
        Err(e) => {
            return Err(e).with_context(|| format!("running {} --version", trainer.display()))
        }
    };
    let version = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success() && version.starts_with("kfaws-trainer "),
        "{} is not the kfaws trainer: `--version` answered {:?} (expected \"kfaws-trainer \
         VERSION\"); pass the kfaws-trainer binary built with `cargo build --workspace --bins`",
        trainer.display(),
        version.lines().next().unwrap_or_default()
    );
    Ok(kfaws::train::trainer_backends(&version))
}

/// `kfaws image build`: builds, writes both forms, prints the digest.
pub fn build(trainer: Option<&Path>, output: &Path, tag: Option<&str>) -> anyhow::Result<u8> {
    let tag = tag.map_or_else(default_tag, str::to_string);
    check_tag(&tag)?;
    let trainer = match trainer {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("cannot locate this kfaws executable")?
            .with_file_name("kfaws-trainer"),
    };
    anyhow::ensure!(
        trainer.is_file(),
        "no trainer binary at {}: build it (`cargo build --workspace --bins`) or pass --trainer PATH",
        trainer.display()
    );
    let mut image = Image::build(&trainer, Path::new("/"))?;
    if let Some(backends) = check_is_trainer(&trainer, VERSION_TIMEOUT)? {
        image = image.with_backends(&backends);
    }
    let oci = output.join("oci");
    let archive = output.join("image.tar");
    layout::write_oci_layout(&oci, &image, &tag)?;
    layout::write_docker_archive(&archive, &image, &tag)?;
    outln!(
        "Built {tag} {}\n  layer {} bytes gzip ({})\n  OCI layout  {}\n  docker load {}",
        image.manifest_digest(),
        image.layer.len(),
        image.diff_id,
        oci.display(),
        archive.display()
    )?;
    Ok(0)
}

/// `kfaws image push`: checks the inputs and the image on disk, then
/// creates the ECR repository if missing and pushes the image
/// ([`kfaws::image::push`]). Prints `<repositoryUri>@sha256:<hex>` alone on
/// stdout (for `$(kfaws image push)`), what was done on stderr.
///
/// The repository is `repository`, else the path of the reference the
/// image was built as (`kfaws image build --tag`, its registry host
/// dropped: ECR names the registry), else `kfaws-trainer`; the tag likewise.
/// The region is `--region`, else the SDK's (AWS_REGION, the profile);
/// no kfaws.toml is needed.
pub async fn push(
    g: &Global,
    image_dir: &Path,
    repository: Option<&str>,
    tag: Option<&str>,
    cancel: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<u8> {
    use kfaws::image::push::{self as p, LocalImage, PushError};

    if let Some(r) = repository {
        p::check_repository_name(r)?;
    }
    if let Some(t) = tag {
        p::check_tag(t)?;
    }
    let image = LocalImage::read(image_dir)?;
    let built = image.reference.as_deref().map(layout::Reference::split);
    let repository = match (repository, built) {
        (Some(r), _) => r.to_string(),
        (None, Some(b)) => {
            if let Err(PushError::InvalidRepository { problem, .. }) =
                p::check_repository_name(b.path)
            {
                anyhow::bail!(
                    "the image was built as {}, and {:?} is not a valid ECR repository name: \
                     {problem}; pass --repository NAME",
                    image.reference.as_deref().unwrap_or_default(),
                    b.path
                );
            }
            b.path.to_string()
        }
        (None, None) => p::DEFAULT_REPOSITORY.to_string(),
    };
    let tag = tag
        .map(str::to_string)
        .or_else(|| image.tag.clone())
        .unwrap_or_else(|| p::FALLBACK_TAG.to_string());
    p::check_tag(&tag)?;

    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(region) = &g.region {
        loader = loader.region(aws_config::Region::new(region.clone()));
    }
    kfaws::aws::warn_if_profile_shadowed(g.aws_profile.as_deref());
    let sdk = kfaws::aws::with_profile(loader, g.aws_profile.as_deref())
        .load()
        .await;
    anyhow::ensure!(
        sdk.region().is_some(),
        "no AWS region: pass --region or set AWS_REGION"
    );
    let pushed = match p::push(&sdk, &image, &repository, &tag, cancel).await {
        Err(e @ PushError::Interrupted { .. }) => {
            errln!("Stopped: {e}.");
            return Ok(kfaws::engine::interrupt::exit_status());
        }
        other => other?,
    };
    errln!(
        "Pushed {repository}:{tag}: {} blob(s) uploaded, {} already in the registry{}{}",
        pushed.uploaded,
        pushed.skipped,
        if pushed.repository.created {
            "; created the repository"
        } else {
            ""
        },
        if pushed.manifest_put {
            ""
        } else {
            "; the tag already named this image"
        },
    );
    let registry = pushed.reference.split('/').next().unwrap_or_default();
    if let Some(host) = built.and_then(|r| r.host).filter(|h| *h != registry) {
        errln!(
            "Note: the image was built as {}; it was pushed to {registry}, the ECR registry of \
             this account and region, not to {host}",
            image.reference.as_deref().unwrap_or_default()
        );
    }
    outln!("{}", pushed.reference)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    /// A `--trainer` that ignores `--version` (here: sleeps) is stopped
    /// after the time limit ([`super::VERSION_TIMEOUT`] in use) and refused,
    /// not waited for.
    #[test]
    fn a_binary_that_does_not_answer_version_is_refused_after_the_time_limit() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("sleeper");
        std::fs::write(&script, "#!/bin/sh\nsleep 60\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let limit = std::time::Duration::from_millis(300);
        let started = std::time::Instant::now();
        let err = super::check_is_trainer(&script, limit)
            .unwrap_err()
            .to_string();
        let took = started.elapsed();
        assert!(
            err.contains(
                "sleeper did not answer --version within 300ms: it is not the kfaws \
                 trainer, which answers at once; pass the kfaws-trainer binary built with"
            ),
            "{err}"
        );
        assert!(took >= limit && took < limit * 10, "{took:?}");
    }

    #[test]
    fn tags_follow_the_docker_reference_grammar() {
        for ok in [
            "kfaws-trainer:1",
            "team/trainer:v1.2",
            "registry.example.com:5000/foo:bar",
            "localhost/foo:bar",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/kfaws-trainer:0.1.0",
            "a__b/c-d:_x",
        ] {
            assert!(super::check_tag(ok).is_ok(), "{ok}");
        }
        for bad in [
            "Trainer_X:1",
            "foo:",
            "/foo:1",
            "foo//bar:1",
            "foo-:1",
            "registry:port/foo:1",
            "foo:-1",
        ] {
            let e = super::check_tag(bad).unwrap_err().to_string();
            assert!(e.contains("is invalid"), "{bad}: {e}");
        }
        for untagged in ["foo", "registry.example.com:5000/foo"] {
            let e = super::check_tag(untagged).unwrap_err().to_string();
            assert!(e.contains("has no tag"), "{untagged}: {e}");
        }
    }
}
