//! Python programs the tests talk to as real peers, installed from PyPI into virtual
//! environments under the user's cache (`${XDG_CACHE_HOME:-~/.cache}/strata/`), once: later runs
//! find them there and install nothing.
//!
//! - llama-cpp-python's OpenAI-compatible server (`llama-cpp-python[server]`), which serves the
//!   embedded model's GGUF file so that `--reasoner openai` is tested against a real server.
//!   PyPI has it only as source: the first install builds llama.cpp (several minutes on two
//!   cores) into a wheel kept in `wheels/`, so a new environment reuses it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::{run as run_command, succeeds};

/// The llama-cpp-python release installed.
pub(crate) const LLAMA_CPP_PYTHON: &str = "0.3.36";

/// The variable that tells the tests where the server's Python is.
pub(crate) const LLAMA_SERVER_PYTHON_VAR: &str = "STRATA_LLAMA_SERVER_PYTHON";

/// `${XDG_CACHE_HOME:-$HOME/.cache}/strata`.
pub(crate) fn cache_dir() -> anyhow::Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .context("neither XDG_CACHE_HOME nor HOME is set: set one to say where to cache Python tools")?;
            PathBuf::from(home).join(".cache")
        }
    };
    Ok(base.join("strata"))
}

/// The Python of the llama-cpp-python server's environment (where it is, or would be).
pub(crate) fn llama_server_python() -> anyhow::Result<PathBuf> {
    Ok(cache_dir()?.join(format!("llama-cpp-python-{LLAMA_CPP_PYTHON}")).join("bin").join("python"))
}

/// Installs llama-cpp-python's server if its environment does not import it yet; returns the
/// environment's Python.
pub(crate) fn llama_server() -> anyhow::Result<PathBuf> {
    let python = llama_server_python()?;
    if python.is_file() && imports_server(&python) {
        println!("llama-cpp-python {LLAMA_CPP_PYTHON} server: {}", python.display());
        return Ok(python);
    }
    let Some(venv) = python.parent().and_then(Path::parent) else {
        bail!("internal: {} has no environment directory", python.display());
    };
    let wheels = cache_dir()?.join("wheels");
    std::fs::create_dir_all(&wheels)
        .with_context(|| format!("cannot create {}", wheels.display()))?;
    if cached_wheel(&wheels)?.is_none() {
        println!(
            "building llama-cpp-python {LLAMA_CPP_PYTHON} from PyPI's source (once: the wheel is kept in {})",
            wheels.display()
        );
        run_command(
            Command::new("python3")
                .args(["-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir"])
                .arg(&wheels)
                .arg(format!("llama-cpp-python=={LLAMA_CPP_PYTHON}"))
                .env("CMAKE_ARGS", cmake_args()),
        )?;
    }
    if !python.is_file() {
        run_command(Command::new("python3").args(["-m", "venv"]).arg(venv))?;
    }
    run_command(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--find-links",
            ])
            .arg(&wheels)
            .arg(format!("llama-cpp-python[server]=={LLAMA_CPP_PYTHON}")),
    )?;
    if !imports_server(&python) {
        bail!(
            "llama-cpp-python {LLAMA_CPP_PYTHON} was installed into {} but `import llama_cpp.server` fails there; remove that directory and run again",
            venv.display()
        );
    }
    Ok(python)
}

/// llama.cpp's build options: AVX2, FMA and F16C when this CPU has them (a build without them
/// runs the model about ten times slower), else the portable baseline. Not `GGML_NATIVE`: it
/// also enables what the CPU lists but a virtual machine may not let a process use (AMX here,
/// which ends the server with an illegal instruction). The wheel stays in this machine's cache.
fn cmake_args() -> &'static str {
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let has = |flag: &str| flags.split_whitespace().any(|f| f == flag);
    if has("avx2") && has("fma") && has("f16c") {
        "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    } else {
        "-DGGML_NATIVE=OFF"
    }
}

/// Whether `python` can import the server.
fn imports_server(python: &Path) -> bool {
    succeeds(Command::new(python).args(["-c", "import llama_cpp.server"]))
}

/// The built wheel of [`LLAMA_CPP_PYTHON`] in `wheels`, if there is one.
fn cached_wheel(wheels: &Path) -> anyhow::Result<Option<PathBuf>> {
    let prefix = format!("llama_cpp_python-{LLAMA_CPP_PYTHON}-");
    for entry in
        std::fs::read_dir(wheels).with_context(|| format!("cannot read {}", wheels.display()))?
    {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with(&prefix) && name.ends_with(".whl") {
            return Ok(Some(path));
        }
    }
    Ok(None)
}
