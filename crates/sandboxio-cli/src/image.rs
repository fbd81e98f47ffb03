//! `sandboxio image`: images for `docker://`. `image build` builds an image from a context
//! directory with the engine's builder (`DockerBackend::build_image`), its log streamed to
//! stderr line by line as the engine sends it.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `sandboxio image ...`.
#[derive(Debug, Args)]
pub struct ImageArgs {
    /// What to do with images.
    #[command(subcommand)]
    pub command: ImageCmd,
}

/// The `image` subcommands.
#[derive(Debug, Subcommand)]
pub enum ImageCmd {
    /// Build an image from a context directory and a Dockerfile on the `docker://` engine;
    /// the build's log goes to stderr as it runs, and a failed build exits non-zero with
    /// the build's own error text.
    #[command(
        after_help = "Examples:\n  sandboxio image build -t my/python:1 .\n  sandboxio image build --dsn docker:///run/docker.sock -f docker/Dockerfile -t my/app:2 --json ."
    )]
    Build(BuildArgs),
}

/// `sandboxio image build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The Docker engine, as a `docker://` DSN.
    #[arg(long, default_value = "docker://")]
    pub dsn: String,
    /// The Dockerfile, relative to CONTEXT.
    #[arg(short = 'f', long = "file", default_value = "Dockerfile", value_name = "DOCKERFILE")]
    pub dockerfile: String,
    /// The image's tag (`name:tag`).
    #[arg(short = 't', long = "tag", required = true)]
    pub tag: String,
    /// Print one JSON object on stdout (`{"image": {"id", "tag"}}`, or `{"error": ..}`).
    #[arg(long)]
    pub json: bool,
    /// The build context: a directory (its `.dockerignore` is honoured).
    pub context: PathBuf,
}

/// Runs `sandboxio image ...`; returns the exit code.
pub async fn run(args: ImageArgs) -> i32 {
    match args.command {
        ImageCmd::Build(args) => build(args).await,
    }
}

#[cfg(feature = "docker")]
async fn build(args: BuildArgs) -> i32 {
    use sandboxio::backends::docker::DockerBackend;
    let backend = match sandboxio::dsn::Dsn::parse(&args.dsn).and_then(|dsn| {
        if dsn.scheme() == "docker" {
            DockerBackend::from_dsn_typed(&dsn)
        } else {
            Err(sandboxio::Error::configuration(format!(
                "`image build` needs a docker:// engine, not {:?}",
                dsn.scheme()
            )))
        }
    }) {
        Ok(backend) => backend,
        Err(e) => return crate::commands::fail(args.json, &e),
    };
    // The log goes to stderr whatever `--json` says: stdout stays the one result. It is the
    // CLI's own line, not a command's output the operator asked for, and a Dockerfile's
    // `RUN` chooses its bytes: escaped, so it cannot retitle or clear the terminal.
    let backend = backend.with_build_log(|line| eprintln!("{}", sandboxio::text::escape(line)));
    let built = tokio::select! {
        built = backend.build_image(&args.context, &args.dockerfile, &args.tag) => built,
        () = crate::commands::interrupt() => {
            // Dropping the build closes the engine connection, which stops it.
            return crate::commands::interrupted(args.json, "the build was stopped");
        }
    };
    match built {
        Ok(image) if args.json => {
            println!("{}", serde_json::json!({ "image": { "id": image.id, "tag": image.tag } }));
            0
        }
        Ok(image) => {
            println!("{}", image.id);
            0
        }
        Err(e) => crate::commands::fail(args.json, &e),
    }
}

#[cfg(not(feature = "docker"))]
async fn build(args: BuildArgs) -> i32 {
    let e = sandboxio::Error::configuration("`image build` needs the CLI's `docker` feature");
    crate::commands::fail(args.json, &e)
}
