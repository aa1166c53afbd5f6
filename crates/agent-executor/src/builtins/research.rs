//! `research_agent`: gathers information on its objective from the workspace's documents and
//! from the URLs it is given, and returns research notes with their sources.
//!
//! 1. **Workspace.** Unless the executor has no workspace, it searches the workspace's files
//!    (the `search` tool, `.gitignore`-aware, hidden entries skipped) for the objective's
//!    keywords (or the `query` regex), ranks the files by how many keywords they match, and
//!    reads the best (`read_file`), with the files named in `paths` (paths or globs, through
//!    `glob`) first. `.strata/` is never read: it holds the capsules of other runs.
//! 2. **URLs.** Every URL in `urls` is checked against the executor's
//!    [`HttpPolicy`](crate::HttpPolicy) before any is fetched: a host outside
//!    `[http] allow_hosts` fails the run ([`FailureKind::Permission`]) and nothing is sent.
//!    Pages are fetched with a GET (redirects followed to allowed hosts only); HTML is reduced
//!    to its text; an error status fails the run with its class (a 5xx is retried).
//! 3. **Notes.** With a model reasoner, it composes notes from the material, citing the
//!    sources as `[n]`; with the rule-based one, the notes are the excerpts, and
//!    `needs_model` says that the summary needs a model.
//!
//! Nothing found and no URLs: the run is blocked ([`FailureKind::MissingInput`]) and says what
//! to give.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use agent_state::{Artifact, ChangeType, FailureKind, shorten};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::text::{html_to_text, in_state_dir, is_html, string_list, workspace_path};
use crate::capsule::Capsule;
use crate::env::Method;
use crate::http::{HttpClient, Outgoing, Redirects, check_url};
use crate::kind::{Kind, KindError, KindOutput};
use crate::request::RunRequest;

/// The name `research_agent` is registered under.
pub const RESEARCH_AGENT: &str = "research_agent";

/// Sources used when `max_sources` is not given.
pub const DEFAULT_MAX_SOURCES: usize = 8;

/// Most sources one run uses (`max_sources` at most).
pub const MAX_SOURCES: usize = 50;

/// Keywords of the objective searched for at most.
const MAX_KEYWORDS: usize = 8;

/// Characters of a source shown as its excerpt.
const EXCERPT_CHARS: usize = 600;

/// Characters of one source given to the reasoner.
const MATERIAL_CHARS: usize = 6_000;

/// Lines searched for at most.
const SEARCH_RESULTS: u64 = 500;

/// Words too common to search for.
const STOP_WORDS: &[&str] = &[
    "about",
    "after",
    "again",
    "all",
    "also",
    "and",
    "any",
    "are",
    "been",
    "before",
    "being",
    "between",
    "both",
    "but",
    "can",
    "could",
    "did",
    "does",
    "doing",
    "each",
    "find",
    "for",
    "from",
    "gather",
    "get",
    "give",
    "had",
    "has",
    "have",
    "here",
    "how",
    "information",
    "into",
    "its",
    "just",
    "know",
    "like",
    "look",
    "make",
    "more",
    "most",
    "not",
    "notes",
    "now",
    "only",
    "other",
    "our",
    "out",
    "over",
    "please",
    "research",
    "same",
    "should",
    "some",
    "such",
    "summarise",
    "summarize",
    "than",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "topic",
    "under",
    "use",
    "using",
    "was",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "why",
    "will",
    "with",
    "would",
    "write",
    "you",
    "your",
];

/// The `research_agent` kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResearchAgent;

/// One source gathered.
struct Source {
    /// A workspace path or a URL.
    name: String,
    /// What is shown of it.
    excerpt: String,
    /// What the reasoner reads of it.
    material: String,
    /// Whether it is a workspace file (an artifact consulted).
    file: bool,
}

#[async_trait]
impl Kind for ResearchAgent {
    fn name(&self) -> &str {
        RESEARCH_AGENT
    }

    fn description(&self) -> &str {
        "gathers information on the objective from the workspace's documents and from given \
         URLs on allowed hosts, and returns research notes with their sources"
    }

    fn inputs_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "urls": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "description": "pages to fetch (http or https); their hosts must be in `[http] allow_hosts`",
                },
                "paths": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "description": "workspace files or globs (`docs/**/*.md`) to read first",
                },
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": "a regex to search the workspace for instead of the objective's keywords",
                },
                "max_sources": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_SOURCES,
                    "description": "most workspace documents to use; default 8",
                },
            },
            "additionalProperties": false,
        })
    }

    async fn run(
        &self,
        request: &RunRequest,
        capsule: &mut Capsule,
    ) -> Result<KindOutput, KindError> {
        let inputs = Inputs::of(request);
        // Every URL is checked before anything is read or sent.
        let mut checked_urls = Vec::with_capacity(inputs.urls.len());
        for url in &inputs.urls {
            checked_urls.push(check_url(&capsule.env().http, url, &format!("url `{url}`"))?);
        }
        let keywords = keywords(&request.objective);
        let search = Search { query: inputs.query.as_deref(), keywords: &keywords };

        let mut sources = Vec::new();
        if capsule.workspace().is_some() {
            capsule.progress(5, format!("searching the workspace for {}", search.described()));
            sources =
                workspace_sources(capsule, &inputs.paths, &search, inputs.max_sources).await?;
            capsule.progress(40, format!("read {} workspace document(s)", sources.len()));
        } else if !inputs.paths.is_empty() {
            return Err(KindError::invalid(
                "`paths` names workspace files, and the executor has no workspace; run it with a \
                 workspace or leave out `paths`",
            ));
        }
        sources.extend(fetch_all(capsule, &checked_urls).await?);
        if sources.is_empty() {
            return Err(nothing_to_research(capsule, &search));
        }

        let (primary_output, confidence, needs_model) =
            notes(capsule, &request.objective, &sources).await?;
        let artifacts = sources
            .iter()
            .filter(|s| s.file)
            .map(|s| Artifact {
                file_path: s.name.clone(),
                description: "a research source".into(),
                change_type: ChangeType::Referenced,
            })
            .collect();
        let data = json!({
            "sources": sources
                .iter()
                .map(|s| json!({"source": s.name, "excerpt": s.excerpt}))
                .collect::<Vec<_>>(),
            "keywords": if inputs.query.is_some() { Vec::new() } else { keywords },
        });
        capsule.progress(100, "research notes ready");
        Ok(KindOutput {
            primary_output: primary_output.trim_end().to_owned(),
            confidence,
            artifacts,
            data,
            needs_model,
        })
    }
}

/// A run's inputs.
struct Inputs {
    /// `urls`: pages to fetch.
    urls: Vec<String>,
    /// `paths`: workspace files or globs to read first.
    paths: Vec<String>,
    /// `query`: a regex searched for instead of the objective's keywords.
    query: Option<String>,
    /// `max_sources`, within 1..=[`MAX_SOURCES`].
    max_sources: usize,
}

impl Inputs {
    fn of(request: &RunRequest) -> Self {
        let max_sources = request
            .inputs
            .get("max_sources")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_MAX_SOURCES, |n| usize::try_from(n).unwrap_or(MAX_SOURCES))
            .clamp(1, MAX_SOURCES);
        Self {
            urls: string_list(request, "urls"),
            paths: string_list(request, "paths"),
            query: request.input_str("query").map(str::to_owned),
            max_sources,
        }
    }
}

/// What the workspace is searched for: the `query` regex, else the objective's keywords.
struct Search<'a> {
    query: Option<&'a str>,
    keywords: &'a [String],
}

/// Search hits, by file: each matching line's number and text.
type Hits = BTreeMap<String, Vec<(u64, String)>>;

impl Search<'_> {
    /// What is searched for, as the progress message says it.
    fn described(&self) -> String {
        match self.query {
            Some(q) => format!("`{q}`"),
            None => self.keywords.join(", "),
        }
    }

    /// The regex searched for: the query, else any keyword as a word (`None`: no keywords).
    fn pattern(&self) -> Option<String> {
        match self.query {
            Some(q) => Some(q.to_owned()),
            None if self.keywords.is_empty() => None,
            None => Some(format!(r"\b(?:{})\b", self.keywords.join("|"))),
        }
    }

    /// The workspace's matching lines, grouped by file, `.strata/` left out.
    async fn hits(&self, capsule: &Capsule) -> Result<Hits, KindError> {
        let mut hits = Hits::new();
        let Some(pattern) = self.pattern() else { return Ok(hits) };
        let found = capsule
            .call_tool(
                "search",
                json!({
                    "pattern": pattern,
                    "case_insensitive": self.query.is_none(),
                    "max_results": SEARCH_RESULTS,
                }),
            )
            .await?;
        for m in found.data.get("matches").and_then(Value::as_array).into_iter().flatten() {
            let (Some(path), Some(line), Some(text)) = (
                m.get("path").and_then(Value::as_str),
                m.get("line").and_then(Value::as_u64),
                m.get("text").and_then(Value::as_str),
            ) else {
                continue;
            };
            if in_state_dir(path) {
                continue;
            }
            hits.entry(path.to_owned()).or_default().push((line, text.to_owned()));
        }
        Ok(hits)
    }

    /// The files hit, best first: by how many keywords they match (with a query, how many
    /// lines), then by how many lines, then by path.
    fn ranked<'h>(&self, hits: &'h Hits) -> Vec<&'h String> {
        let mut ranked: Vec<(&String, usize, usize)> = hits
            .iter()
            .map(|(path, lines)| {
                let distinct = if self.query.is_some() {
                    lines.len()
                } else {
                    self.keywords
                        .iter()
                        .filter(|k| {
                            lines.iter().any(|(_, t)| t.to_lowercase().contains(k.as_str()))
                        })
                        .count()
                };
                (path, distinct, lines.len())
            })
            .collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(b.0)));
        ranked.into_iter().map(|(path, _, _)| path).collect()
    }
}

/// Why there is nothing to research: the run is blocked, and the error says what to give.
fn nothing_to_research(capsule: &Capsule, search: &Search<'_>) -> KindError {
    let looked = if capsule.workspace().is_none() {
        "the executor has no workspace".to_owned()
    } else {
        match search.query {
            Some(q) => format!("no workspace document matches `{q}`"),
            None if search.keywords.is_empty() => {
                "the objective has no keywords to search the workspace for".to_owned()
            }
            None => {
                format!("no workspace document mentions {}", search.keywords.join(", "))
            }
        }
    };
    KindError::missing(format!(
        "something to research: {looked} and no `urls` were given; give `urls` (on hosts \
         in `[http] allow_hosts`), `paths` of workspace documents, or a `query`"
    ))
}

/// The notes on `objective` from `sources`: composed by a model reasoner, citing the sources
/// as `[n]`; else the excerpts, with what needs a model. With their confidence.
async fn notes(
    capsule: &mut Capsule,
    objective: &str,
    sources: &[Source],
) -> Result<(String, f64, Option<String>), KindError> {
    let mut names = String::new();
    let mut listing = String::new();
    for (i, source) in sources.iter().enumerate() {
        let _ = writeln!(names, "[{}] {}", i + 1, source.name);
        let _ = writeln!(listing, "[{}] {}", i + 1, source.name);
        for line in source.excerpt.lines() {
            let _ = writeln!(listing, "    {line}");
        }
    }
    let mut material = String::new();
    for (i, source) in sources.iter().enumerate() {
        let _ = write!(material, "[{}] {}\n{}\n\n", i + 1, source.name, source.material);
    }

    capsule.progress(80, format!("writing notes from {} source(s)", sources.len()));
    let instruction = format!(
        "Write research notes on: {}\nUse only the numbered sources given as material, cite \
         them as [n], and say what they leave open.",
        objective.trim()
    );
    let composed = capsule.compose(&instruction, &material).await?;
    Ok(match composed {
        Some(notes) => (format!("{}\n\nSources:\n{names}", notes.trim()), 0.8, None),
        None => (
            format!(
                "Research notes on: {}\n\nExcerpts from {} source(s):\n{listing}",
                objective.trim(),
                sources.len()
            ),
            0.4,
            Some(
                "summarising the sources into research notes: the notes are the excerpts \
                 found, uninterpreted"
                    .to_owned(),
            ),
        ),
    })
}

/// The objective's search words: lower-cased words of three letters or more that are not
/// common words, in order, at most [`MAX_KEYWORDS`]; two-letter words if there are no others.
pub(crate) fn keywords(objective: &str) -> Vec<String> {
    let words: Vec<String> = objective
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .map(str::to_lowercase)
        .filter(|w| !w.is_empty() && !STOP_WORDS.contains(&w.as_str()))
        .collect();
    let pick = |min: usize| {
        let mut seen = BTreeSet::new();
        words
            .iter()
            .filter(|w| w.chars().count() >= min && seen.insert(w.as_str()))
            .take(MAX_KEYWORDS)
            .cloned()
            .collect::<Vec<_>>()
    };
    let long = pick(3);
    if long.is_empty() { pick(2) } else { long }
}

/// The workspace documents: `paths` first (in order), then the files the search ranks best.
async fn workspace_sources(
    capsule: &Capsule,
    paths: &[String],
    search: &Search<'_>,
    max_sources: usize,
) -> Result<Vec<Source>, KindError> {
    let named = named_files(capsule, paths).await?;
    let hits = search.hits(capsule).await?;

    let mut chosen: Vec<(String, bool)> = Vec::new();
    for path in named {
        if !chosen.iter().any(|(p, _)| *p == path) {
            chosen.push((path, true));
        }
    }
    for path in search.ranked(&hits) {
        if chosen.len() >= max_sources.max(paths.len()) {
            break;
        }
        if !chosen.iter().any(|(p, _)| p == path) {
            chosen.push((path.clone(), false));
        }
    }

    let mut sources = Vec::with_capacity(chosen.len());
    for (path, named) in chosen {
        let lines = hits.get(&path).map(Vec::as_slice).unwrap_or_default();
        sources.push(read_source(capsule, path, named, lines).await?);
    }
    Ok(sources)
}

/// The files `paths` names, globs expanded (`.strata/` left out of what a glob finds, and
/// refused when a glob names it).
async fn named_files(capsule: &Capsule, paths: &[String]) -> Result<Vec<String>, KindError> {
    let mut named: Vec<String> = Vec::new();
    for entry in paths {
        if entry.contains(['*', '?', '[', '{']) {
            if in_state_dir(entry) {
                return Err(KindError::invalid(format!(
                    "paths: `{entry}` is inside `.strata/`, which holds the capsules of other \
                     runs; research cannot read it"
                )));
            }
            let found = capsule.call_tool("glob", json!({"pattern": entry})).await?;
            let files =
                found.data.get("files").and_then(Value::as_array).cloned().unwrap_or_default();
            named.extend(
                files
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|p| !in_state_dir(p))
                    .map(str::to_owned),
            );
        } else {
            named.push(workspace_path(entry, "paths")?);
        }
    }
    Ok(named)
}

/// Reads the workspace file at `path` as a source (`named`: the user named it; `lines`: its
/// search hits).
async fn read_source(
    capsule: &Capsule,
    path: String,
    named: bool,
    lines: &[(u64, String)],
) -> Result<Source, KindError> {
    let content = match capsule.call_tool("read_file", json!({"path": path})).await {
        Ok(read) => read.output,
        // A file the user named must be readable; a search hit that is not (too large,
        // not text) is shown by its matching lines.
        Err(error) if named => return Err(error),
        Err(error) => {
            tracing::debug!(path = %path, error = %error, "research: a search hit could not be read; its matching lines stand for it");
            lines.iter().map(|(n, t)| format!("{n}: {t}")).collect::<Vec<_>>().join("\n")
        }
    };
    let excerpt = excerpt_of(&content, lines);
    capsule.note(
        "source_read",
        json!({"source": path, "bytes": content.len(), "matching_lines": lines.len()}),
    );
    Ok(Source { name: path, excerpt, material: shorten(&content, MATERIAL_CHARS), file: true })
}

/// What is shown of a document: the lines around its first matching line (or its first
/// lines), cut to [`EXCERPT_CHARS`].
fn excerpt_of(content: &str, hits: &[(u64, String)]) -> String {
    let all: Vec<&str> = content.lines().collect();
    let first = hits
        .iter()
        .map(|(n, _)| usize::try_from(*n).unwrap_or(usize::MAX).saturating_sub(1))
        .min()
        .filter(|i| *i < all.len())
        .unwrap_or(0);
    let start = first.saturating_sub(1);
    let lines: Vec<&str> = all
        .iter()
        .skip(start)
        .take(5)
        .map(|l| l.trim_end())
        .filter(|l| !l.trim().is_empty())
        .collect();
    shorten(&lines.join("\n"), EXCERPT_CHARS)
}

/// Fetches the URLs (already checked), in order, as sources.
async fn fetch_all(capsule: &mut Capsule, urls: &[String]) -> Result<Vec<Source>, KindError> {
    let mut sources = Vec::with_capacity(urls.len());
    if urls.is_empty() {
        return Ok(sources);
    }
    capsule.progress(45, format!("fetching {} URL(s)", urls.len()));
    let client = HttpClient::new(&capsule.env().http, Redirects::AllowedHosts)?;
    for url in urls {
        sources.push(fetch(capsule, &client, url).await?);
    }
    capsule.progress(70, format!("fetched {} URL(s)", urls.len()));
    Ok(sources)
}

/// Fetches one URL (already checked) as a source.
async fn fetch(capsule: &Capsule, client: &HttpClient, url: &str) -> Result<Source, KindError> {
    let fetched = client
        .send(Outgoing {
            method: Method::Get,
            url: url.to_owned(),
            headers: Vec::new(),
            body: None,
        })
        .await?;
    if !fetched.success() {
        let kind = FailureKind::from_http_status(fetched.status).unwrap_or(FailureKind::Client);
        return Err(KindError::new(
            kind,
            format!(
                "url `{url}` answered {}: {}",
                fetched.status_line(),
                shorten(fetched.text().trim(), 200)
            ),
        ));
    }
    let raw = fetched.text();
    let mut text =
        if is_html(fetched.content_type.as_deref(), &raw) { html_to_text(&raw) } else { raw };
    if fetched.truncated {
        let _ = write!(
            text,
            "\n[cut: the page is longer than {} bytes, the policy's `max_body_bytes`]",
            capsule.env().http.max_body_bytes
        );
    }
    capsule.note(
        "source_fetched",
        json!({
            "source": url,
            "answered_by": fetched.url,
            "status": fetched.status,
            "bytes": fetched.body.len(),
            "truncated": fetched.truncated,
        }),
    );
    Ok(Source {
        name: url.to_owned(),
        excerpt: shorten(text.trim(), EXCERPT_CHARS),
        material: shorten(text.trim(), MATERIAL_CHARS),
        file: false,
    })
}
