//! `cargo xtask publish-check`: every publishable workspace member packaged as `cargo publish`
//! would package it, in dependency order, without uploading anything.
//!
//! The members come from `cargo metadata`, so a new crate is checked as soon as it is in the
//! workspace; one with `publish = false` (xtask; the fuzz targets are a workspace of their own)
//! is left out. Before cargo runs, the order is worked out here from the members' dependencies
//! on each other, and what cargo would only report one crate at a time is reported at once: a
//! normal or build dependency on a member without a `version` beside its `path`, a dependency
//! of a publishable crate on an unpublishable one, and a cycle (a dev-dependency with a version
//! counts, since crates.io needs it to exist first; one without is stripped from the package).
//!
//! Then one `cargo package` for all of them: cargo packages the crates in that same order and
//! resolves each one's dependencies on the others against the ones it has just packaged (a
//! local registry laid over crates.io), so crates that are not on crates.io yet still check.
//! See [`CI_VERIFY`] for why CI does not build the packages (`--verify` does).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::{capture, cargo, run as run_command};

/// How `cargo package` runs in CI: `--no-verify`, so it does not build each packaged crate from
/// its `.crate` file.
///
/// Verifying builds each packaged crate in a target directory of its own, every dependency
/// compiled again for each crate: measured here on 2 shared cores, agent-state took 2 min 41 s,
/// agent-telemetry 6 min 45 s and nats-store 11 min 49 s, the first three of 17 (agent-core,
/// agent-llm and the engine bring far more), where this step may add about 2 minutes to CI;
/// without it the whole step takes about 75 s, most of it reading crates.io's index. What that
/// build would find is mostly caught without it: a file a crate needs from outside its
/// directory (`include_str!`, `#[path]`) fails [`escaping_includes`] here, a path dependency
/// without a version or an unpublishable one fails [`publish_order`], and `cargo package
/// --no-verify` still resolves every packaged crate's dependencies (its `Cargo.lock` is made
/// against crates.io and the crates packaged before it), checks the manifest as it will be
/// published and lists the files that go in. What only the build finds is a crate that
/// compiles in the workspace only because another member turns on a feature of a shared
/// dependency for it: `cargo xtask publish-check --verify` builds every package, for a person
/// to run before a release.
pub(crate) const CI_VERIFY: bool = false;

/// A workspace member as packaging sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) name: String,
    /// Its manifest's directory.
    pub(crate) dir: String,
    /// `publish` is not `false` (nor an empty list of registries).
    pub(crate) publishable: bool,
    /// Its dependencies on other members.
    pub(crate) deps: Vec<Dep>,
}

/// A member's dependency on another member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dep {
    pub(crate) name: String,
    /// `dev`, `build` or `normal`.
    pub(crate) kind: String,
    /// It has a `version` beside its `path` (without one, cargo strips a dev-dependency from
    /// the package and refuses any other kind).
    pub(crate) versioned: bool,
}

/// Packages every publishable member in dependency order, building each package when `verify`,
/// and says how long it took.
pub(crate) fn run(root: &Path, verify: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    let metadata = capture(cargo(root).args(["metadata", "--format-version", "1", "--no-deps"]))?;
    let metadata: Value =
        serde_json::from_str(&metadata).context("cargo metadata printed invalid JSON")?;
    let members = members(&metadata)?;
    let order = publish_order(&members)?;
    let escapes = escaping_includes(root, &members, &order)?;
    if !escapes.is_empty() {
        for escape in &escapes {
            println!("{escape}");
        }
        bail!(
            "{} file(s) a packaged crate needs are outside its directory, listed above: a \
             published crate holds only its own directory, so keep a copy inside it (and a test \
             that the two are the same)",
            escapes.len()
        );
    }
    println!("publish order ({} crates): {}", order.len(), order.join(", "));
    let mut package = cargo(root);
    // `--allow-dirty`: what is checked is the working tree, committed or not (CI's is a clean
    // checkout anyway); nothing is uploaded.
    package.args(["package", "--locked", "--allow-dirty"]);
    if !verify {
        package.arg("--no-verify");
    }
    for name in &order {
        package.args(["-p", name]);
    }
    run_command(&mut package)?;
    println!(
        "publish-check: {} crates packaged in {:.1}s",
        order.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The workspace members in `cargo metadata --no-deps` output, with their dependencies on each
/// other.
pub(crate) fn members(metadata: &Value) -> anyhow::Result<Vec<Member>> {
    let ids: BTreeSet<&str> = metadata
        .get("workspace_members")
        .and_then(Value::as_array)
        .context("cargo metadata names no workspace_members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let packages = metadata
        .get("packages")
        .and_then(Value::as_array)
        .context("cargo metadata lists no packages")?;
    let in_workspace = |package: &&Value| {
        package.get("id").and_then(Value::as_str).is_some_and(|id| ids.contains(id))
    };
    let packages: Vec<&Value> = packages.iter().filter(in_workspace).collect();
    let names: BTreeSet<&str> =
        packages.iter().filter_map(|package| package.get("name")?.as_str()).collect();
    packages.iter().map(|package| member(package, &names)).collect()
}

/// One package of `cargo metadata`, keeping its dependencies on `members`.
fn member(package: &Value, members: &BTreeSet<&str>) -> anyhow::Result<Member> {
    let name = package
        .get("name")
        .and_then(Value::as_str)
        .context("a package in cargo metadata has no name")?;
    let manifest = package
        .get("manifest_path")
        .and_then(Value::as_str)
        .with_context(|| format!("cargo metadata gives {name} no manifest_path"))?;
    let dir = Path::new(manifest).parent().map(|dir| dir.display().to_string()).unwrap_or_default();
    // `null`: any registry; `[]`: `publish = false`.
    let publishable = match package.get("publish") {
        None | Some(Value::Null) => true,
        Some(Value::Array(registries)) => !registries.is_empty(),
        Some(other) => bail!("cargo metadata gives {name} an unexpected publish: {other}"),
    };
    let mut deps = Vec::new();
    for dep in package.get("dependencies").and_then(Value::as_array).into_iter().flatten() {
        let Some(dep_name) = dep.get("name").and_then(Value::as_str) else { continue };
        if dep_name == name || !members.contains(dep_name) || dep.get("path").is_none() {
            continue;
        }
        deps.push(Dep {
            name: dep_name.to_owned(),
            kind: dep.get("kind").and_then(Value::as_str).unwrap_or("normal").to_owned(),
            versioned: dep.get("req").and_then(Value::as_str).is_some_and(|req| req != "*"),
        });
    }
    Ok(Member { name: name.to_owned(), dir, publishable, deps })
}

/// The publishable members, each after every member it needs on crates.io first (its normal and
/// build dependencies, and its dev-dependencies that have a version); ties by name. Fails
/// naming every dependency that cannot be published and any cycle.
pub(crate) fn publish_order(members: &[Member]) -> anyhow::Result<Vec<String>> {
    let publishable: BTreeSet<&str> =
        members.iter().filter(|m| m.publishable).map(|m| m.name.as_str()).collect();
    let mut problems = Vec::new();
    // Each publishable member and the members it waits for.
    let mut waits: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for member in members.iter().filter(|m| m.publishable) {
        let waits_for = waits.entry(member.name.as_str()).or_default();
        for dep in &member.deps {
            let dev = dep.kind == "dev";
            if !dep.versioned {
                if !dev {
                    problems.push(format!(
                        "{} depends on {} by path only: give it a version beside the path \
                         (`{} = {{ version = \"...\", path = ... }}`, or `.workspace = true` on \
                         the workspace's entry, which has one)",
                        member.name, dep.name, dep.name
                    ));
                }
                continue;
            }
            if !publishable.contains(dep.name.as_str()) {
                problems.push(format!(
                    "{} ({} dependency) needs {}, which has `publish = false`: publish it too, or \
                     {}",
                    member.name,
                    dep.kind,
                    dep.name,
                    if dev { "drop the version so packaging strips it" } else { "drop it" }
                ));
                continue;
            }
            waits_for.insert(dep.name.as_str());
        }
    }
    if !problems.is_empty() {
        bail!("these crates cannot be published:\n  {}", problems.join("\n  "));
    }
    let mut order = Vec::new();
    while !waits.is_empty() {
        let ready: Vec<&str> = waits
            .iter()
            .filter(|(_, waits_for)| waits_for.is_empty())
            .map(|(name, _)| *name)
            .collect();
        if ready.is_empty() {
            let stuck: Vec<&str> = waits.keys().copied().collect();
            bail!(
                "these crates wait for each other, so none can be published first: {} (a \
                 dev-dependency in the cycle can go without its version: packaging strips it)",
                stuck.join(", ")
            );
        }
        for name in ready {
            waits.remove(name);
            for waits_for in waits.values_mut() {
                waits_for.remove(name);
            }
            order.push(name.to_owned());
        }
    }
    Ok(order)
}

/// Every `include_str!`, `include_bytes!`, `include!` and `#[path]` in the packaged crates' own
/// code (`src/` and `build.rs`, less unit-test files) that names a file outside its crate's
/// directory, as `file:line: what`. Unit-test files (`tests.rs`, `*_tests.rs` and anything under
/// a `tests/` folder) are left out: only tests compile them, and a packaged crate is built
/// without its tests.
fn escaping_includes(
    root: &Path,
    members: &[Member],
    order: &[String],
) -> anyhow::Result<Vec<String>> {
    let mut escapes = Vec::new();
    for member in members.iter().filter(|m| order.contains(&m.name)) {
        let dir = Path::new(&member.dir);
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files)?;
        if dir.join("build.rs").is_file() {
            files.push(dir.join("build.rs"));
        }
        for file in files {
            let relative = |path: &Path| {
                path.strip_prefix(root).unwrap_or(path).to_string_lossy().replace('\\', "/")
            };
            let (file_name, crate_dir) = (relative(&file), relative(dir));
            if is_test_file(&file_name) {
                continue;
            }
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("could not read {}", file.display()))?;
            escapes.extend(outside_references(&file_name, &text, &crate_dir));
        }
    }
    Ok(escapes)
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path, files: &mut Vec<std::path::PathBuf>) -> anyhow::Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in
        std::fs::read_dir(dir).with_context(|| format!("could not list {}", dir.display()))?
    {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, files)?;
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// Whether `path` (with `/` separators) is a unit-test file by this repository's convention.
pub(crate) fn is_test_file(path: &str) -> bool {
    path.ends_with("/tests.rs") || path.ends_with("_tests.rs") || path.contains("/tests/")
}

/// The references in `text`, the file at `path` in the crate at `crate_dir` (both relative, `/`
/// separated), to files outside `crate_dir`: each as `path:line: the reference`.
pub(crate) fn outside_references(path: &str, text: &str, crate_dir: &str) -> Vec<String> {
    const OPENINGS: [(&str, &str); 4] = [
        ("include_str!(", "include_str!"),
        ("include_bytes!(", "include_bytes!"),
        ("include!(", "include!"),
        ("#[path =", "#[path]"),
    ];
    let base: Vec<&str> =
        path.rsplit_once('/').map_or(Vec::new(), |(dir, _)| dir.split('/').collect());
    let inside: Vec<&str> = crate_dir.split('/').filter(|part| !part.is_empty()).collect();
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        for (opening, what) in OPENINGS {
            let Some(at) = line.find(opening) else { continue };
            let rest = line[at + opening.len()..].trim_start();
            let Some(literal) = rest.strip_prefix('"').and_then(|rest| rest.split('"').next())
            else {
                continue; // not a plain string literal (`concat!`, `env!`): not followed
            };
            if !stays_inside(&base, literal, &inside) {
                found.push(format!(
                    "{path}:{}: {what} \"{literal}\" reaches outside {crate_dir}",
                    index + 1
                ));
            }
        }
    }
    found
}

/// Whether `relative`, taken from the folder `base`, names a file under `inside`.
fn stays_inside(base: &[&str], relative: &str, inside: &[&str]) -> bool {
    if relative.starts_with('/') {
        return false;
    }
    let mut resolved: Vec<&str> = base.to_vec();
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if resolved.pop().is_none() {
                    return false;
                }
            }
            part => resolved.push(part),
        }
    }
    resolved.len() > inside.len() && resolved.starts_with(inside)
}
