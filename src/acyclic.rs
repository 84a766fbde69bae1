//! Tests that modules import one another without a cycle, at three levels: the crate's
//! top-level modules (`src/x.rs` or the folder `src/x/` with everything in it); the modules of
//! the optimizer's engine (`src/opt/`), of its rulebook (`src/rulebook/`), of the weights
//! (`src/weights/`), of the quantization kernels (`src/quant/`) and of the graph passes
//! (`src/passes/`); and every file of the crate. Also that neither the engine nor ONNX I/O
//! imports the rulebook. A module names another as `crate::m` (`crate::opt::m` inside the
//! optimizer) or `super::m` with one `super::` per level of nesting, outside comments and test
//! modules (inline `#[cfg(test)] mod` blocks, and the files of `#[cfg(test)] mod name;`). A
//! file names the deepest module a `crate::`, `super::` or `self::` path reaches (a folder's
//! module is its `mod.rs`); no concept is split over files that import each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The `.rs` files under `dir`, recursively, but those of test modules declared as
/// `#[cfg(test)] mod name;` (the file `name.rs` or the folder `name/` beside the declaring
/// module's own files).
fn sources(dir: &Path) -> Vec<PathBuf> {
    fn all(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.extend(all(&path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
        files
    }
    let files = all(dir);
    let mut tests: Vec<PathBuf> = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for pair in lines.windows(2) {
            let declared = pair[1]
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let (true, Some(name)) = (pair[0] == "#[cfg(test)]", declared) {
                let stem = path.file_stem().unwrap();
                let own = match stem == "mod" || stem == "lib" {
                    true => path.parent().unwrap().to_path_buf(),
                    false => path.with_extension(""),
                };
                tests.push(own.join(format!("{name}.rs")));
                tests.push(own.join(name));
            }
        }
    }
    files
        .into_iter()
        .filter(|f| !tests.iter().any(|t| f.starts_with(t)))
        .collect()
}

/// `text` without comments and test modules (`#[cfg(test)]` on a `mod`).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed == "#[cfg(test)]" && lines.peek().is_some_and(|l| l.trim().starts_with("mod ")) {
            let mut depth = 0i64;
            for line in lines.by_ref() {
                depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
                if depth <= 0 && (line.contains('}') || line.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        if !trimmed.starts_with("//") {
            out.push_str(line.split(" //").next().unwrap_or(""));
            out.push('\n');
        }
    }
    out
}

/// The first path segment after each occurrence of `prefix` in `code`; for a group
/// (`prefix{a::x, b}`) the first segment of each member.
fn named_after(code: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let mut depth = 0;
                let mut start = 0;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            names.push(ident(&group[start..i]));
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            names.push(ident(&group[start..i]));
                            start = i + 1;
                        }
                        _ => {}
                    }
                }
            }
            None => names.push(ident(rest)),
        }
    }
    names
}

/// Module → the other modules it names, for the modules of `src/{folder}` (`crate::{prefix}m`
/// names `m`): the crate's with `("", "")`, the engine's with `("opt", "opt::")`.
fn import_graph(folder: &str, prefix: &str) -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(folder);
    let module = |path: &Path| -> String {
        let rel = path.strip_prefix(&root).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        first.trim_end_matches(".rs").to_string()
    };
    let own = ["mod.rs", "lib.rs", "main.rs"].map(|f| root.join(f));
    let files: Vec<PathBuf> = sources(&root)
        .into_iter()
        .filter(|p| !own.contains(p))
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|p| module(p)).collect();
    let mut graph = BTreeMap::new();
    for path in &files {
        let from = module(path);
        let text = code(&std::fs::read_to_string(path).unwrap());
        // `super::` once per level of nesting below the root names one of its modules.
        let rel = path.strip_prefix(&root).unwrap();
        let folder_root = rel.file_name().is_some_and(|n| n == "mod.rs");
        let level = rel.components().count() - usize::from(folder_root);
        let mut named = named_after(&text, &format!("crate::{prefix}"));
        named.extend(named_after(&text, &"super::".repeat(level)));
        let targets: &mut BTreeSet<String> = graph.entry(from.clone()).or_default();
        targets.extend(
            named
                .into_iter()
                .filter(|m| *m != from && modules.contains(m)),
        );
    }
    graph
}

/// A cycle of `graph`, if it has one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit<'a>(
        node: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| *n == node) {
            let mut cycle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// The full paths `code` names after `crate`, `super` or `self`, groups expanded
/// (`crate::a::{b::C, d}` → `crate::a::b::C`, `crate::a::d`), as segments.
fn paths(code: &str) -> Vec<Vec<String>> {
    fn expand(prefix: &[String], body: &str, out: &mut Vec<Vec<String>>) {
        let mut depth = 0;
        let mut start = 0;
        let mut parts = Vec::new();
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&body[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&body[start..]);
        for part in parts {
            let part = part.trim();
            let mut path = prefix.to_vec();
            match part.find("::{") {
                Some(at) if part.ends_with('}') => {
                    path.extend(part[..at].split("::").map(String::from));
                    expand(&path, &part[at + 3..part.len() - 1], out);
                }
                _ => {
                    let head = part.split(" as ").next().unwrap_or("");
                    path.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
                    out.push(path);
                }
            }
        }
    }
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| rest.starts_with(p));
        let free = at == 0 || !(is_ident(bytes[at - 1] as char) || bytes[at - 1] == b':');
        if !(starts && free) {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let len = rest
            .find(|c: char| !(is_ident(c) || c == ':'))
            .unwrap_or(rest.len());
        let head: Vec<String> = rest[..len]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if rest[len..].starts_with('{') {
            let mut depth = 0;
            let end = rest[len..]
                .char_indices()
                .find_map(|(i, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    (depth == 0).then_some(len + i)
                })
                .unwrap_or(rest.len() - 1);
            expand(&head, &rest[len + 1..end], &mut out);
            at += end + 1;
        } else {
            out.push(head);
            at += len;
        }
    }
    out
}

/// File → the other files it names, for every module of the crate (`lib.rs` and `main.rs`
/// aside), keyed by module path (`opt::rules`; a folder's `mod.rs` is the folder's path).
fn file_graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let module = |path: &Path| -> Vec<String> {
        let rel = path.strip_prefix(&root).unwrap().with_extension("");
        let mut segments: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if segments.last().is_some_and(|s| s == "mod") {
            segments.pop();
        }
        segments
    };
    let own = ["lib.rs", "main.rs"].map(|f| root.join(f));
    let files: Vec<PathBuf> = sources(&root)
        .into_iter()
        .filter(|p| !own.contains(p))
        .collect();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|p| module(p)).collect();
    let mut graph = BTreeMap::new();
    for path in &files {
        let from = module(path);
        let text = code(&std::fs::read_to_string(path).unwrap());
        let targets: &mut BTreeSet<String> = graph.entry(from.join("::")).or_default();
        for named in paths(&text) {
            let mut segments = match named[0].as_str() {
                "crate" => Vec::new(),
                _ => from.clone(),
            };
            let mut rest = &named[..];
            if named[0] == "crate" {
                rest = &named[1..];
            }
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "super" => {
                        segments.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
            segments.extend(rest.iter().cloned());
            let target = (1..=segments.len())
                .rev()
                .map(|n| segments[..n].to_vec())
                .find(|m| modules.contains(m));
            if let Some(target) = target.filter(|t| *t != from) {
                targets.insert(target.join("::"));
            }
        }
    }
    graph
}

#[test]
fn files_import_each_other_without_a_cycle() {
    let graph = file_graph();
    for (module, wanted) in [
        ("build", "opt"),
        ("opt::pipeline", "opt::rules"),
        ("weights::dispatch", "weights::quantized"),
        ("rulebook::appliers::gqa", "rulebook::appliers::gqa_mask"),
        ("models::llama", "models::decoder"),
    ] {
        assert!(
            graph[module].contains(wanted),
            "the scan lost the import {module} → {wanted}: {:?}",
            graph[module]
        );
    }
    assert_eq!(find_cycle(&graph), None);
}

#[test]
fn crate_modules_import_each_other_without_a_cycle() {
    let graph = import_graph("", "");
    for (module, wanted) in [
        ("build", "opt"),
        ("build", "rulebook"),
        ("verify", "onnx"),
        ("rulebook", "opt"),
        ("rulebook", "onnx"),
        ("weights", "quant"),
        ("passes", "weights"),
    ] {
        assert!(
            graph[module].contains(wanted),
            "the scan lost the import {module} → {wanted}: {graph:?}"
        );
    }
    for module in ["opt", "onnx"] {
        assert!(
            !graph[module].contains("rulebook"),
            "{module} imports the rulebook: {graph:?}"
        );
    }
    assert_eq!(find_cycle(&graph), None, "{graph:?}");
}

#[test]
fn engine_modules_import_each_other_without_a_cycle() {
    let graph = import_graph("opt", "opt::");
    for (module, wanted) in [
        ("rules", "gate"),
        ("pipeline", "rules"),
        ("pipeline", "lower"),
        ("analysis", "fingerprint"),
    ] {
        assert!(
            graph[module].contains(wanted),
            "the scan lost the import {module} → {wanted}: {graph:?}"
        );
    }
    assert_eq!(find_cycle(&graph), None, "{graph:?}");
}

#[test]
fn rulebook_modules_import_each_other_without_a_cycle() {
    let graph = import_graph("rulebook", "rulebook::");
    for (module, wanted) in [
        ("appliers", "decompose"),
        ("appliers", "genai_contract"),
        ("conditions", "recognize"),
        ("recognize_gemm", "head_layout"),
    ] {
        assert!(
            graph[module].contains(wanted),
            "the scan lost the import {module} → {wanted}: {graph:?}"
        );
    }
    assert_eq!(find_cycle(&graph), None, "{graph:?}");
}

#[test]
fn weight_quantization_and_pass_modules_import_each_other_without_a_cycle() {
    let graphs: BTreeMap<&str, _> = ["weights", "quant", "passes"]
        .into_iter()
        .map(|folder| (folder, import_graph(folder, &format!("{folder}::"))))
        .collect();
    for (folder, module, wanted) in [
        ("weights", "dispatch", "quantized"),
        ("weights", "quantized", "eval"),
        ("quant", "columns", "rtn"),
    ] {
        assert!(
            graphs[folder][module].contains(wanted),
            "the scan lost the import {folder}::{module} → {wanted}: {graphs:?}"
        );
    }
    for (folder, graph) in &graphs {
        assert_eq!(find_cycle(graph), None, "src/{folder}: {graph:?}");
    }
}

#[test]
fn the_scan_sees_grouped_imports_and_finds_cycles() {
    let named = named_after(
        "use super::{a::X, b};\nuse crate::opt::c::{D, E};\nx::super::no",
        "super::",
    );
    assert_eq!(named, ["a", "b"]);
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    let named = paths("use crate::a::{b::{C, d}, e as f};\nlet x = super::g::h(self::i);");
    let named: Vec<String> = named.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        named,
        [
            "crate::a::b::C",
            "crate::a::b::d",
            "crate::a::e",
            "super::g::h",
            "self::i"
        ]
    );
    let text = "use x;\n// super::y\n#[cfg(test)]\nmod tests {\n    fn f() {\n    }\n}\nuse w;\n";
    assert_eq!(code(text), "use x;\nuse w;\n");
}
