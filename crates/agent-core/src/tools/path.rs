//! Path confinement: resolving a requested path inside the workspace, or refusing it.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use super::ToolError;

/// Resolves `requested` against the canonical `workspace` root and returns the path to use.
///
/// The path is first normalized lexically (`.` dropped, `..` applied) and must stay under the
/// root. Then its nearest existing ancestor (the path itself when it exists) is canonicalized,
/// which resolves symlinks, and must still be under the root; the missing components are
/// appended to it. So the result is canonical for an existing path, and for a path to create it
/// is the canonical existing directory plus plain names.
///
/// Blocking: call it on the blocking pool.
pub(crate) fn resolve(workspace: &Path, tool: &str, requested: &str) -> Result<PathBuf, ToolError> {
    if requested.is_empty() {
        return Err(ToolError::invalid(tool, "`path`: must not be empty"));
    }
    let outside = || ToolError::PathOutsideWorkspace {
        path: requested.to_owned(),
        workspace: workspace.to_path_buf(),
    };
    let lexical = normalize(&workspace.join(requested));
    if !lexical.starts_with(workspace) {
        return Err(outside());
    }
    let mut existing = lexical.as_path();
    let mut missing = Vec::new();
    loop {
        match std::fs::canonicalize(existing) {
            Ok(canonical) if canonical.starts_with(workspace) => {
                let mut resolved = canonical;
                resolved.extend(missing.iter().rev());
                return Ok(resolved);
            }
            Ok(_) => return Err(outside()),
            Err(err) if err.kind() == ErrorKind::NotFound && existing != workspace => {
                let (Some(name), Some(parent)) = (existing.file_name(), existing.parent()) else {
                    return Err(outside());
                };
                missing.push(name);
                existing = parent;
            }
            Err(err) => return Err(ToolError::io(tool, existing, err)),
        }
    }
}

/// `path` relative to `workspace` for messages and data, `.` for the root itself.
pub(crate) fn display(workspace: &Path, path: &Path) -> String {
    match path.strip_prefix(workspace) {
        Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
        Ok(relative) => relative.to_string_lossy().into_owned(),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

/// `path` with `.` dropped and each `..` removing the previous component (never above `/`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => {
                out.push(component.as_os_str());
            }
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
        }
    }
    out
}
