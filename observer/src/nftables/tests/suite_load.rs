//! Reading nftables' own `tests/py/**/*.t` files the way upstream's `nft-test.py` does, and
//! loading their `ok` rules with the real `nft` into a namespace: one `nft -f` script per file,
//! the commands nft refuses taken out (nft names their line) until the rest loads, and one
//! command at a time when nft's error names no line.

use std::collections::BTreeMap;

use super::netns::Netns;

/// One `ok` rule of a `.t` file as added to one chain.
#[derive(Debug, Clone)]
pub struct SuiteRule {
    /// `family/file.t:line`.
    pub origin: String,
    pub family: String,
    pub table: String,
    pub chain: String,
    /// The rule as written in the file.
    pub text: String,
    /// The listing the file expects when it differs from `text` (`rule;ok;expected`).
    pub expected: Option<String>,
}

/// One command of a file's script: setup (table, chain, set, element, object) or a rule.
#[derive(Debug, Clone)]
struct Command {
    text: String,
    rule: Option<usize>,
}

/// A parsed `.t` file: the script's commands in file order and the rules they add.
#[derive(Debug, Default)]
pub struct SuiteFile {
    commands: Vec<Command>,
    pub rules: Vec<SuiteRule>,
}

/// What loading a file gave: the rules nft accepted (indices into `rules`, in the order they
/// were added) and those it refused, with nft's reason.
#[derive(Debug, Default)]
pub struct Loaded {
    pub accepted: Vec<usize>,
    pub refused: Vec<(usize, String)>,
    /// Setup commands nft refused (a set type or an object this nft or kernel lacks).
    pub setup_refused: Vec<(String, String)>,
}

/// Parse a `.t` file (`origin` names it in reports).
pub fn parse(origin: &str, text: &str) -> SuiteFile {
    let mut file = SuiteFile::default();
    let mut chains: BTreeMap<String, String> = BTreeMap::new();
    // (family, table, chains) in file order.
    let mut tables: Vec<(String, String, Vec<String>)> = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        if line.trim().is_empty() || line.starts_with('#') || line.starts_with('-') {
            continue;
        }
        let setup =
            |file: &mut SuiteFile, text: String| file.commands.push(Command { text, rule: None });
        if let Some(rest) = line.strip_prefix(':') {
            let (name, config) = rest.split_once(';').unwrap_or((rest, ""));
            chains.insert(name.to_string(), config.to_string());
        } else if let Some(rest) = line.strip_prefix('*') {
            let mut it = rest.split(';');
            let (fam, table) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
            let names: Vec<String> = it
                .next()
                .unwrap_or("")
                .split(',')
                .map(str::to_string)
                .collect();
            setup(&mut file, format!("add table {fam} {table}"));
            for c in &names {
                let config = chains.get(c).map(String::as_str).unwrap_or("");
                let body = if config.is_empty() {
                    String::new()
                } else {
                    format!(" {{ {config}; }}")
                };
                setup(&mut file, format!("add chain {fam} {table} {c}{body}"));
            }
            tables.push((fam.into(), table.into(), names));
        } else if let Some(rest) = line.strip_prefix('!') {
            let Some((decl, "ok")) = rest.rsplit_once(';') else {
                continue;
            };
            let Some(body) = set_body(decl) else { continue };
            for (fam, table, _) in &tables {
                setup(&mut file, format!("add set {fam} {table} {body}"));
            }
        } else if let Some(rest) = line.strip_prefix('?') {
            let Some((decl, "ok")) = rest.rsplit_once(';') else {
                continue;
            };
            let (name, elems) = decl.split_once(' ').unwrap_or((decl, ""));
            for (fam, table, _) in &tables {
                let t = format!("add element {fam} {table} {name} {{ {} }}", elems.trim());
                setup(&mut file, t);
            }
        } else if let Some(rest) = line.strip_prefix('%') {
            let (decl, state) = match rest.rfind('}') {
                Some(b) => (&rest[..=b], rest[b + 1..].trim_start_matches(';')),
                None => rest.rsplit_once(';').unwrap_or((rest, "")),
            };
            if state != "ok" {
                continue;
            }
            let Some((kind, name, spec)) = object(decl) else {
                continue;
            };
            for (fam, table, _) in &tables {
                setup(&mut file, format!("add {kind} {fam} {table} {name} {spec}"));
            }
        } else {
            let parts: Vec<&str> = line.split(';').collect();
            if parts.len() < 2 || parts.len() > 3 || parts[1].trim() != "ok" {
                continue;
            }
            let expected = parts.get(2).map(|e| e.trim().to_string());
            for (fam, table, names) in &tables {
                for chain in names {
                    let rule = SuiteRule {
                        origin: format!("{origin}:{}", n + 1),
                        family: fam.clone(),
                        table: table.clone(),
                        chain: chain.clone(),
                        text: parts[0].trim().to_string(),
                        expected: expected.clone(),
                    };
                    file.commands.push(Command {
                        text: format!("add rule {fam} {table} {chain} {}", rule.text),
                        rule: Some(file.rules.len()),
                    });
                    file.rules.push(rule);
                }
            }
        }
    }
    file
}

/// `name type T [. T2 ...] [timeout X] [flags F]` as `name { type ...; timeout X; flags F; }`.
fn set_body(decl: &str) -> Option<String> {
    let tokens: Vec<&str> = decl.split(' ').filter(|t| !t.is_empty()).collect();
    let (name, ty) = (tokens.first()?, tokens.get(2)?);
    let mut ty = ty.to_string();
    let mut i = 3;
    while tokens.get(i) == Some(&".") {
        ty = format!("{ty} . {}", tokens.get(i + 1)?);
        i += 2;
    }
    let mut body = format!("{name} {{ type {ty}; ");
    while i + 1 < tokens.len() {
        body.push_str(&format!("{} {}; ", tokens[i], tokens[i + 1]));
        i += 2;
    }
    body.push('}');
    Some(body)
}

/// `name type KIND SPEC...` as (kind, name, spec); `ct helper`/`ct timeout`/`ct expectation`
/// are two-word kinds.
fn object(decl: &str) -> Option<(String, String, String)> {
    let tokens: Vec<&str> = decl.split(' ').collect();
    let (name, kind) = (tokens.first()?, tokens.get(2)?);
    let mut rest = 3;
    let mut kind = kind.to_string();
    if kind == "ct" {
        if let Some(sub) = tokens.get(3) {
            kind = format!("ct {sub}");
            rest = 4;
        }
    }
    let spec = tokens.get(rest..).unwrap_or_default().join(" ");
    Some((kind, name.to_string(), spec))
}

/// Load a parsed file into the namespace.
pub fn load(ns: &Netns, tag: &str, file: &SuiteFile) -> Loaded {
    let mut loaded = Loaded::default();
    let mut pending: Vec<&Command> = file.commands.iter().collect();
    let path =
        std::env::temp_dir().join(format!("observer-suite-{tag}-{}.nft", std::process::id()));
    for _round in 0..8 {
        let script: String = pending.iter().map(|c| format!("{}\n", c.text)).collect();
        std::fs::write(&path, script).expect("write script");
        let Err(err) = ns.try_sh(&format!("nft -f {}", path.display())) else {
            let _ = std::fs::remove_file(&path);
            loaded.accepted = pending.iter().filter_map(|c| c.rule).collect();
            return loaded;
        };
        let bad = error_lines(&err, &path.display().to_string());
        if bad.is_empty() {
            break;
        }
        let mut kept = Vec::new();
        for (i, c) in pending.into_iter().enumerate() {
            match bad.get(&(i + 1)) {
                Some(reason) => refuse(&mut loaded, c, reason.clone()),
                None => kept.push(c),
            }
        }
        pending = kept;
    }
    let _ = std::fs::remove_file(&path);
    // One command at a time: nft -f commits nothing when any command fails.
    for c in pending {
        let script = path.with_extension("one");
        std::fs::write(&script, &c.text).expect("write command");
        match ns.try_sh(&format!("nft -f {}", script.display())) {
            Ok(_) => loaded.accepted.extend(c.rule),
            Err(e) => refuse(&mut loaded, c, reason_of(&e)),
        }
        let _ = std::fs::remove_file(&script);
    }
    loaded
}

fn refuse(loaded: &mut Loaded, c: &Command, reason: String) {
    match c.rule {
        Some(r) => loaded.refused.push((r, reason)),
        None => loaded.setup_refused.push((c.text.clone(), reason)),
    }
}

/// `PATH:LINE:COLS: Error: WHY` lines of nft's output: line → why.
fn error_lines(out: &str, path: &str) -> BTreeMap<usize, String> {
    let mut bad = BTreeMap::new();
    for l in out.lines() {
        let Some(rest) = l.split_once(path).map(|(_, r)| r) else {
            continue;
        };
        let mut it = rest.trim_start_matches(':').splitn(3, ':');
        let (Some(line), Some(_cols), Some(why)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if let Ok(n) = line.parse::<usize>() {
            bad.entry(n)
                .or_insert_with(|| why.trim().trim_start_matches("Error: ").to_string());
        }
    }
    bad
}

/// The first `Error:` line of nft's output, or the whole message.
fn reason_of(err: &str) -> String {
    err.lines()
        .find_map(|l| l.split_once("Error: ").map(|(_, w)| w.trim().to_string()))
        .unwrap_or_else(|| err.trim().to_string())
}
